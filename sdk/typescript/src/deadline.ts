import { InvalidArgumentError } from "./errors.js";

/*
 * The SDK's deadline rules, each written once (issue 46; docs/contract.md
 * §7 and §14). Every deadline, stop time and CancelBefore check in the
 * package calls these: the plain holding's, the session's and a session
 * holding's deadline, the Elector's term, the conformance agent.
 */

/** The default CancelBefore's cap, ms: a term stops at most this long before its deadline unless told otherwise. */
export const defaultCancelBeforeMaxMs = 250;

/**
 * safeSpan is how long after the send time of a confirmation (a plain
 * acquire or renew, or an acknowledged heartbeat) the holder may act:
 * spanMs × (1 − driftMargin), spanMs being the plain TTL or the session's
 * window, driftMargin the fraction given up to clock-rate differences.
 */
export function safeSpan(spanMs: number, driftMargin: number): number {
  return spanMs * (1 - driftMargin);
}

/**
 * deadlineOf is the deadline a confirmation sent at sentAt (on the
 * keeper's clock) gives: sentAt + safeSpan(spanMs, driftMargin). After it
 * the agent must not act as holder unless a later confirmation moved it.
 */
export function deadlineOf(sentAt: number, spanMs: number, driftMargin: number): number {
  return sentAt + safeSpan(spanMs, driftMargin);
}

/**
 * stopTime is when leading on a holding ends: deadline − cancelBeforeMs,
 * so that the work has cancelBeforeMs to stop before the deadline. There
 * is no further timer slack: a timer that fires late (a busy event loop)
 * eats into cancelBeforeMs, which is why its default is not 0.
 */
export function stopTime(deadline: number, cancelBeforeMs: number): number {
  return deadline - cancelBeforeMs;
}

/**
 * cancelBeforeLimit is the bound a CancelBefore must stay below for a
 * span: safeSpan(spanMs, driftMargin) − spanMs / 2. A term's deadline
 * moves with every confirmation (a session's heartbeat every window/4, a
 * plain renewal every TTL/3 by default); below this bound a missed one
 * does not end the term.
 */
export function cancelBeforeLimit(spanMs: number, driftMargin: number): number {
  return safeSpan(spanMs, driftMargin) - spanMs / 2;
}

/** cancelBeforeFits reports whether cancelBeforeMs fits the span (rule L3): 0 ≤ cancelBeforeMs < cancelBeforeLimit(spanMs, driftMargin). */
export function cancelBeforeFits(cancelBeforeMs: number, spanMs: number, driftMargin: number): boolean {
  return cancelBeforeMs >= 0 && cancelBeforeMs < cancelBeforeLimit(spanMs, driftMargin);
}

/** defaultCancelBefore is the CancelBefore of a term when none is given: min(250 ms, spanMs / 10). */
export function defaultCancelBefore(spanMs: number): number {
  return Math.min(defaultCancelBeforeMaxMs, spanMs / 10);
}

/**
 * cancelBeforeFor returns the CancelBefore a term on spanMs uses: given,
 * or defaultCancelBefore(spanMs) when given is undefined. One that does
 * not fit (cancelBeforeFits) is never capped: it throws
 * InvalidArgumentError (code "invalid_argument", field "cancelBeforeMs")
 * naming the value, the limit and the span (what: "session window" or
 * "TTL").
 */
export function cancelBeforeFor(given: number | undefined, spanMs: number, driftMargin: number, what: string): number {
  const cb = given ?? defaultCancelBefore(spanMs);
  if (cancelBeforeFits(cb, spanMs, driftMargin)) return cb;
  const limit = cancelBeforeLimit(spanMs, driftMargin);
  const detail =
    `cancelBeforeMs ${cb}${given === undefined ? " (the default)" : ""} must be at least 0 and below ${limit} ms ` +
    `(${what} ${spanMs} ms × (1 − driftMargin ${driftMargin}) − ${what} / 2)`;
  throw new InvalidArgumentError(`leasesvc Elector: ${detail}`, { code: "invalid_argument", detail, fields: [{ field: "cancelBeforeMs", detail }] });
}
