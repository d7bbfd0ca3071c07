/**
 * The public shapes of sessions (docs/contract.md §14): options, requests,
 * the errors a session throws, what a holding hears; and how a session's
 * error answer becomes a LeaseError. session.ts re-exports them.
 */
import type { Backoff } from "./backoff.js";
import type { Clock } from "./clock.js";
import { errorClassOf, LeaseError, LeaseHeldError, LeaseReservedError, RateLimitedError } from "./errors.js";
import { parseLease, parseTime } from "./lease.js";

/** Options of a session (Client.openSession). Every field has a default. */
export interface SessionOptions {
  /**
   * The heartbeat window, whole ms within 200 … 60,000 (docs/contract.md
   * §14): when the service hears no heartbeat for this long it ends every
   * lease of the session. Heartbeats go every window/4. Default 1,000.
   */
  windowMs?: number;
  /**
   * The fraction of the window given up to clock-rate differences, 0.01 …
   * 0.5: the session's deadline is (the clock's time when the last
   * acknowledged heartbeat was sent) + windowMs × (1 − driftMargin).
   * Default 0.1.
   */
  driftMargin?: number;
  /**
   * The monotonic clock the deadlines are measured on: the send times of
   * heartbeats and acquires. A Keeper passes its own, so that its
   * holdings compare their deadlines with the clock they were measured on.
   * Only its now() is used: heartbeats, timeouts and reconnections run on
   * the real timers. Default: performance.now().
   */
  clock?: Clock;
  /** Spaces the reconnections of a dropped socket. Default 50 ms … 1 s, doubling. */
  reconnectBackoff?: Partial<Backoff>;
  /** Receives a line when the socket drops, resumes or moves, and when the session ends. Default: none. */
  logger?: { info(message: string, fields?: Record<string, unknown>): void; warn(message: string, fields?: Record<string, unknown>): void };
}

/** Asks for a lease through a session: as Client.acquire, without ttlMs (a session lease lives as long as its session). */
export interface SessionAcquireRequest {
  holder: string;
  metadata?: Record<string, unknown>;
  waitMs?: number;
  priority?: number;
  preempt?: boolean;
}

/** Writes metadata or a checkpoint of a session-held holding (a renew: the session, not the call, keeps it alive). */
export interface SessionRenewRequest {
  holder: string;
  fencingToken: number;
  metadata?: Record<string, unknown>;
  checkpoint?: Record<string, unknown>;
}

/** Hands a session-held holding over (docs/contract.md §8). */
export interface SessionTransferRequest {
  holder: string;
  fencingToken: number;
  to: string;
  toPrincipal?: string;
  checkpoint?: Record<string, unknown>;
  reserveMs?: number;
}

/** Options of one session call. */
export interface SessionCallOptions {
  /** Aborting it abandons the call (an acquire answered afterwards is released). */
  signal?: AbortSignal;
  /** Bounds the call (plus waitMs for an acquire). Default: the Client's requestTimeoutMs. */
  timeoutMs?: number;
}

/** The session ended: closed, or the service no longer knows it (it expired while the agent was away). Its leases are gone. */
export class SessionEndedError extends LeaseError {
  static override readonly defaultCode: string = "session_ended";
}

/**
 * The service refused to open a session at its session limit
 * (LEASESVC_MAX_SESSIONS or LEASESVC_MAX_SESSIONS_PER_CALLER: 429
 * resource_exhausted answered to open, docs/contract.md §14). An Elector
 * then holds with plain renewals, and asks for a session again on its
 * next run. A 429 refusing the upgrade at that cap (its problem's limit is
 * "sessions") is one too; any other 429 before the upgrade is the caller's
 * rate limit, a plain RateLimitedError.
 */
export class SessionLimitError extends RateLimitedError {}

/** What a holding led through a session hears of it: the Elector's term registers one (Session.watchHolding). */
export interface HoldingWatcher {
  /** The holding's fencing token: pushes about other tokens are not for it. */
  readonly token: number;
  /** The holding ended: a lost or revoked push (LeaseLostError), or the session ended (SessionEndedError). */
  lost(err: LeaseError): void;
  /** A preempting candidate asks the holding to step down (docs/contract.md §8). */
  yieldTo(to: string): void;
  /** A heartbeat sent at sentAt was acknowledged, and counts for the holding or moved the session's deadline to deadline (both on the session's clock): read the holding's deadline again (Session.holdingDeadline). */
  acked(sentAt: number, deadline: number): void;
}

/** What the Client hands a session. */
export interface SessionDeps {
  baseUrl: string;
  /** The upgrade's headers (credentials, User-Agent), made afresh for each connection. */
  headers(signal: AbortSignal): Promise<Record<string, string>>;
  requestTimeoutMs: number;
  fetch: typeof fetch;
}

/** problemError turns a session's error answer into the LeaseError the Client would throw for the same problem over REST. */
export function problemError(op: string, name: string, raw: unknown): LeaseError {
  const p = (raw !== null && typeof raw === "object" ? raw : {}) as Record<string, unknown>;
  const status = num(p["status"]);
  const code = typeof p["code"] === "string" ? p["code"] : "";
  const detail = typeof p["detail"] === "string" ? p["detail"] : "";
  if (code === "lease_held" && p["lease"] !== null && typeof p["lease"] === "object") {
    return new LeaseHeldError(parseLease(p["lease"]), { status, detail });
  }
  if (code === "lease_reserved" && p["lease"] !== null && typeof p["lease"] === "object") {
    const l = parseLease(p["lease"]);
    const who = typeof p["reservedFor"] === "string" && p["reservedFor"] !== "" ? p["reservedFor"] : l.reservedFor;
    return new LeaseReservedError(l, who, parseTime(p["reservedUntil"]) ?? l.reservedUntil, { status, detail });
  }
  const Cls = errorClassOf(status, code);
  const what = name === "" ? `leasesvc session ${op}` : `leasesvc session ${op} "${name}"`;
  return new Cls(`${what}: ${code || status} (${status})${detail ? ": " + detail : ""}`, { status, code: code || undefined, detail });
}

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}
