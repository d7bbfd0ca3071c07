import { type Backoff, backoffWithDefaults } from "./backoff.js";
import type { Client } from "./client.js";
import { Keeper, defaultHolder } from "./keeper.js";
import type { Lease } from "./lease.js";
import { plainSpan } from "./plainholding.js";
import type { Session } from "./session.js";

/*
 * The Elector's options, their defaults and checks, the errors its leading
 * signal is aborted with, and buildKeeper, which turns the options into the
 * Keeper a run holds its lease through.
 */

/** What the Elector logs to: a line for every gain and loss of leadership and every failed call. */
export interface ElectorLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** A renew that succeeded, as ElectorOptions.onRenewed sees it. */
export interface RenewInfo {
  /** The fencing token of the term. */
  fencingToken: number;
  /** performance.now() when the renew was sent. */
  sentAt: number;
  /** performance.now() at which the leading signal is now due to be aborted if no later renew succeeds. */
  deadline: number;
}

/** What a term of leadership began with, as onStartedLeading's third argument sees it. */
export interface TermInfo {
  /** The lease as the acquire that began the term answered it. */
  lease: Lease;
  /**
   * The checkpoint the term inherited (docs/contract.md §8): the JSON object
   * its predecessor (or an earlier term) last wrote; null when there is
   * none. Resume the work from it.
   */
  checkpoint: Record<string, unknown> | null;
  /** The fencing token of the holding that wrote checkpoint; 0 without one. */
  checkpointToken: number;
}

/** The reason of a leading signal aborted because the Elector stepped down for a preempting candidate (docs/contract.md §8). */
export class YieldedError extends Error {
  /** A stable code, for logs and the conformance agent. */
  readonly code = "yielded";
  /** The candidate stepped down for. */
  readonly to: string;
  constructor(to: string) {
    super(`leasesvc: stepped down for the preempting candidate "${to}"`);
    this.name = "YieldedError";
    this.to = to;
  }
}

/** The reason of a leading signal aborted because Elector.transfer handed the holding over to a named successor. */
export class TransferredError extends Error {
  /** A stable code, for logs and the conformance agent. */
  readonly code = "transferred";
  /** The successor. */
  readonly to: string;
  constructor(to: string) {
    super(`leasesvc: leadership transferred to "${to}"`);
    this.name = "TransferredError";
    this.to = to;
  }
}

/** Thrown by Elector.setCheckpoint, checkpoint and transfer when there is no term they could act on. */
export class NotLeadingError extends Error {
  constructor(why = "") {
    super("leasesvc: elector is not leading" + (why ? ": " + why : ""));
    this.name = "NotLeadingError";
  }
}

/** The highest priority the service accepts (docs/contract.md §8). */
export const maxPriority = 1000;
/** Options of an Elector. Every field but onStartedLeading has a default; the constructor checks them all. */
export interface ElectorOptions {
  /** This participant's identity, 1–256 printable characters, unique among the participants. Default "{hostname}-{pid}". */
  holder?: string;
  /** The lease duration asked for, whole ms. Default 30,000. */
  ttlMs?: number;
  /**
   * How long after a successful acquire or renew the next renew is sent
   * (minus up to renewJitter of it). Default ttlMs / 3. With cancelBeforeMs
   * it must stay below ttlMs × (1 − driftMargin).
   */
  renewIntervalMs?: number;
  /** The fraction of renewIntervalMs, 0 … 0.5, by which each renew comes early at random. Default 0.1. */
  renewJitter?: number;
  /**
   * The fraction of the TTL given up to the difference between the local
   * clock's rate and the backend's, 0.01 … 0.5. The safe deadline of a
   * holding is (performance.now() when the acquire or renew that last
   * succeeded was sent) + ttlMs × (1 − driftMargin). Default 0.1.
   */
  driftMargin?: number;
  /**
   * How long before the safe deadline the leading signal is aborted when
   * renewals keep failing, so that work has that long to stop. Default 0.
   * (The timer is armed a further timer slack earlier: see Elector.)
   */
  cancelBeforeMs?: number;
  /**
   * How long one acquire waits on the service (waitMs) for the holding of
   * another to end, 0 … 60,000; a follower takes over as soon as the
   * service sees the lease free. Default 30,000. Negative disables waiting:
   * followers poll every renewIntervalMs.
   */
  waitMs?: number;
  /** Spaces the retries of a failed acquire or renew. Default: initial min(100, TTL/30) ms, max min(5,000, TTL/6) ms, doubling. */
  retryBackoff?: Partial<Backoff>;
  /** Bounds the release sent on a graceful stop. Default 5,000 ms. */
  releaseTimeoutMs?: number;
  /** A JSON object attached to the lease on every acquire. */
  metadata?: Record<string, unknown>;
  /**
   * Receives a line for every gain and loss of leadership, every failed
   * call and the mode the lease is held in. Default: none, but for one
   * line on stderr saying how the lease is held (`leasesvc: elector "x"
   * holds through a session (window 1s)`, or with plain renewals and why),
   * once per process for each change of mode.
   */
  logger?: ElectorLogger;
  /**
   * Called when this Elector becomes leader; required. signal is aborted
   * when leadership ends: at once on lease_lost, before the safe deadline
   * when renewals fail however the service fails, and when run's signal is
   * aborted; signal.reason says why (LeaseLostError, SafeDeadlineError, or
   * run's reason). token is the term's fencing token: pass it with every
   * write downstream. Stop all leader work when signal aborts, and return
   * (or resolve). Returning while still leading resigns: the lease is
   * released and run resolves.
   */
  onStartedLeading: (signal: AbortSignal, token: number, term: TermInfo) => void | Promise<void>;
  /** Called after every term, whatever ended it, once onStartedLeading has returned (and, on a graceful stop, after the release). */
  onStoppedLeading?: () => void;
  /** Called whenever the holder seen leading changes, this Elector's own included. */
  onNewLeader?: (holder: string) => void;
  /** Called after each successful renew of a term. */
  onRenewed?: (info: RenewInfo) => void;
  /**
   * 0 … 1000, ranks this Elector among the candidates waiting for the lease
   * (docs/contract.md §8): when a holding ends, the lease is reserved for a
   * few seconds for the best waiting candidate. With priority > 0 or
   * preempt every acquire carries it (the holding records it) and the
   * waiting acquires register this Elector as a candidate; with neither
   * (the default) it waits unranked, as before. Default 0.
   */
  priority?: number;
  /** The waiting acquires ask a holder whose holding has a strictly lower priority to step down. Needs waitMs ≥ 0. Nothing is taken by force. */
  preempt?: boolean;
  /**
   * Called at most once per term when a renewal answers that the preempting
   * candidate yieldTo asks this leader to step down; signal is the leading
   * signal, still live: it may save progress with setCheckpoint or
   * checkpoint. When it returns (or resolves), the Elector steps down: it
   * aborts the leading signal with a YieldedError, waits for
   * onStartedLeading to return, releases the lease with the latest
   * checkpoint, calls onStoppedLeading and campaigns again. Omitted: it
   * steps down the same way at once.
   */
  onYieldRequested?: (signal: AbortSignal, yieldTo: string) => void | Promise<void>;
  /**
   * The session to hold the lease through (docs/contract.md §14; open one
   * with Client.openSession). Electors may share one; it stays open when
   * they stop. Omitted (and without plainRenewals): the Client's shared
   * session, opened on first use (window 1 s) and closed when the last
   * Elector using it stops; a service without sessions (404, 405 or 501 on
   * the sessions route) falls back to plain renewals, and so does one that
   * refuses the open at its session limit (429; asked again on the next
   * run). So does a runtime without WebSocket (Node 20 without the ws
   * package), with a warning: the logger's, or without one console.warn,
   * once per process.
   */
  session?: Session;
  /**
   * Holds the lease with plain renewals (acquire with ttlMs, renew every
   * renewIntervalMs) instead of a session. Default false.
   */
  plainRenewals?: boolean;
  /**
   * The Keeper to hold the lease through (docs/contract.md §14, issue 38):
   * it decides sessions or plain renewals, and its own ttlMs, driftMargin,
   * renewals and retries apply; session and plainRenewals are then
   * ignored. It stays open when the Elector stops. Omitted: the Elector
   * builds one for each run from these options.
   */
  keeper?: Keeper;
}

/** Defaults of ElectorOptions (docs/contract.md §7). */
export const electorDefaults = Object.freeze({
  ttlMs: 30_000,
  driftMargin: 0.1,
  renewJitter: 0.1,
  waitMs: 30_000,
  releaseTimeoutMs: 5_000,
});

export const maxWaitMs = 60_000;
/** The timer slack: the fraction of the TTL (at most maxTimerSlackMs) by which the deadline timer is armed early. */
const timerSlackFraction = 0.1;
const maxTimerSlackMs = 500;

/** The checked options, defaults filled in. */
export type Resolved = Required<Omit<ElectorOptions, "metadata" | "logger" | "onStoppedLeading" | "onNewLeader" | "onRenewed" | "retryBackoff" | "onYieldRequested" | "session" | "keeper">> &
  Pick<ElectorOptions, "metadata" | "onStoppedLeading" | "onNewLeader" | "onRenewed" | "onYieldRequested" | "session" | "keeper"> & {
    retryBackoff: Backoff;
    logger: ElectorLogger;
    /** The logger the caller gave, if any (the keeper warns on the console without one). */
    givenLogger: ElectorLogger | undefined;
  };

export const noLogger: ElectorLogger = { info() {}, warn() {} };

function validHolder(h: string): boolean {
  const chars = [...h];
  return chars.length >= 1 && chars.length <= 256 && chars.every((c) => !/[\p{C}\p{Z}]/u.test(c) || c === " ");
}

/** timerSlack is how much earlier than its deadline less cancelBeforeMs a term stops, for a period (TTL or window) of ms: 10% of it, at most 500 ms. */
export function timerSlack(ttlMs: number): number {
  return Math.min(maxTimerSlackMs, ttlMs * timerSlackFraction);
}

/** resolve fills the defaults into a copy of the options and checks them, naming the field at fault. */
export function resolve(opts: ElectorOptions): Resolved {
  if (typeof opts.onStartedLeading !== "function") throw new TypeError("leasesvc Elector: options.onStartedLeading is required");
  const holder = opts.holder ?? defaultHolder();
  if (!validHolder(holder)) throw new RangeError(`leasesvc Elector: holder ${JSON.stringify(holder)} must be 1–256 printable characters`);
  const ttlMs = opts.ttlMs ?? electorDefaults.ttlMs;
  if (!Number.isInteger(ttlMs) || ttlMs < 1) throw new RangeError(`leasesvc Elector: ttlMs ${ttlMs} must be a positive whole number of milliseconds`);
  const driftMargin = opts.driftMargin ?? electorDefaults.driftMargin;
  if (!(driftMargin >= 0.01 && driftMargin <= 0.5)) throw new RangeError(`leasesvc Elector: driftMargin ${driftMargin} must be within 0.01 … 0.5`);
  const renewIntervalMs = opts.renewIntervalMs ?? ttlMs / 3;
  const renewJitter = opts.renewJitter ?? electorDefaults.renewJitter;
  if (!(renewJitter >= 0 && renewJitter <= 0.5)) throw new RangeError(`leasesvc Elector: renewJitter ${renewJitter} must be within 0 … 0.5`);
  const cancelBeforeMs = opts.cancelBeforeMs ?? 0;
  if (!(cancelBeforeMs >= 0)) throw new RangeError(`leasesvc Elector: cancelBeforeMs ${cancelBeforeMs} must not be negative`);
  const safe = plainSpan(ttlMs, driftMargin);
  if (!(renewIntervalMs > 0) || renewIntervalMs + cancelBeforeMs + timerSlack(ttlMs) >= safe) {
    throw new RangeError(
      `leasesvc Elector: renewIntervalMs ${renewIntervalMs} must be positive and, with cancelBeforeMs ${cancelBeforeMs} and the timer slack ${timerSlack(ttlMs)}, below ttlMs × (1 − driftMargin) = ${safe}`,
    );
  }
  const waitMs = opts.waitMs ?? electorDefaults.waitMs;
  if (!Number.isInteger(waitMs) || waitMs > maxWaitMs) throw new RangeError(`leasesvc Elector: waitMs ${waitMs} must be whole milliseconds, at most ${maxWaitMs}`);
  const initial = Math.max(1, Math.min(100, ttlMs / 30));
  const retryBackoff = backoffWithDefaults(opts.retryBackoff, "ElectorOptions.retryBackoff", {
    initialMs: initial,
    maxMs: Math.max(initial, Math.min(5000, ttlMs / 6)),
    multiplier: 2,
  });
  const releaseTimeoutMs = opts.releaseTimeoutMs ?? electorDefaults.releaseTimeoutMs;
  if (!(releaseTimeoutMs > 0)) throw new RangeError(`leasesvc Elector: releaseTimeoutMs ${releaseTimeoutMs} must be positive`);
  const priority = opts.priority ?? 0;
  if (!Number.isInteger(priority) || priority < 0 || priority > maxPriority) throw new RangeError(`leasesvc Elector: priority ${priority} must be an integer within 0 … ${maxPriority}`);
  const preempt = opts.preempt ?? false;
  if (preempt && waitMs < 0) throw new RangeError("leasesvc Elector: preempt needs waiting acquires: waitMs must not be negative");
  if (opts.metadata !== undefined && (opts.metadata === null || typeof opts.metadata !== "object" || Array.isArray(opts.metadata))) {
    throw new TypeError("leasesvc Elector: metadata must be a JSON object");
  }
  return {
    holder,
    ttlMs,
    renewIntervalMs,
    renewJitter,
    driftMargin,
    cancelBeforeMs,
    waitMs,
    retryBackoff,
    releaseTimeoutMs,
    metadata: opts.metadata,
    logger: opts.logger ?? noLogger,
    onStartedLeading: opts.onStartedLeading,
    onStoppedLeading: opts.onStoppedLeading,
    onNewLeader: opts.onNewLeader,
    onRenewed: opts.onRenewed,
    priority,
    preempt,
    onYieldRequested: opts.onYieldRequested,
    session: opts.session,
    plainRenewals: opts.plainRenewals ?? false,
    keeper: opts.keeper,
    givenLogger: opts.logger,
  };
}

/**
 * buildKeeper makes the Keeper of one run from the Elector's options: the
 * only place an Elector chooses between a session and plain renewals.
 * Without a logger, the keeper names the Elector of the lease name in its
 * line on stderr saying how it holds (KeeperOptions.announce).
 */
export function buildKeeper(client: Client, o: Resolved, name: string): Keeper {
  return new Keeper(client, {
    mode: o.plainRenewals ? "plain" : (o.session ?? "session"),
    ttlMs: o.ttlMs,
    driftMargin: o.driftMargin,
    renewIntervalMs: o.renewIntervalMs,
    renewJitter: o.renewJitter,
    retryBackoff: o.retryBackoff,
    releaseTimeoutMs: o.releaseTimeoutMs,
    ...(o.givenLogger === undefined ? { announce: `elector ${JSON.stringify(name)}` } : { logger: o.givenLogger }),
    logPrefix: "leasesvc elector",
  });
}
