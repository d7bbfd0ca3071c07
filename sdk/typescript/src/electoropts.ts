import type { Backoff } from "./backoff.js";
import { type Keeper, type KeeperOptions, defaultHolder } from "./keeper.js";
import type { Lease } from "./lease.js";
import type { Session } from "./session.js";

/*
 * The Elector's options, their defaults and checks, the errors its leading
 * signal is aborted with, and the deprecated options of Electors built on
 * a Client (LegacyElectorOptions), split into an Elector's and a Keeper's.
 */

/** What the Elector logs to: a line for every gain and loss of leadership and every failed call. */
export interface ElectorLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** A confirmation of the holding (a renewal, an acknowledged heartbeat), as ElectorCallbacks.onRenewed sees it. */
export interface RenewInfo {
  /** The fencing token of the term. */
  fencingToken: number;
  /** The keeper's clock time when the confirmation was sent. */
  sentAt: number;
  /** The keeper's clock time at which the leading signal is now due to be aborted (stopTime) if no later confirmation comes. */
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
/** What an Elector calls. Only onStartedLeading is required. */
export interface ElectorCallbacks {
  /**
   * Called when this Elector becomes leader; required. signal is aborted
   * when leadership ends: at once on lease_lost, at the term's stop time
   * (the holding's deadline − cancelBeforeMs) when confirmations stop
   * however the service fails, and when run's signal is aborted;
   * signal.reason says why (LeaseLostError, SafeDeadlineError, or run's
   * reason). token is the term's fencing token: pass it with every write
   * downstream. Stop all leader work when signal aborts, and return (or
   * resolve). Returning while still leading resigns: the lease is
   * released and run resolves.
   */
  onStartedLeading: (signal: AbortSignal, token: number, term: TermInfo) => void | Promise<void>;
  /** Called after every term, whatever ended it, once onStartedLeading has returned (and, on a graceful stop, after the release). */
  onStoppedLeading?: () => void;
  /** Called whenever the holder seen leading changes, this Elector's own included. */
  onNewLeader?: (holder: string) => void;
  /** Called after each confirmation that moved the term's deadline (a renewal, an acknowledged heartbeat). */
  onRenewed?: (info: RenewInfo) => void;
  /**
   * Called at most once per term when the preempting candidate yieldTo
   * asks this leader to step down; signal is the leading signal, still
   * live: it may save progress with setCheckpoint or checkpoint. When it
   * returns (or resolves), the Elector steps down: it aborts the leading
   * signal with a YieldedError, waits for onStartedLeading to return,
   * releases the lease with the latest checkpoint, calls onStoppedLeading
   * and campaigns again. Omitted: it steps down the same way at once.
   */
  onYieldRequested?: (signal: AbortSignal, yieldTo: string) => void | Promise<void>;
}

/**
 * Options of an Elector over a Keeper: what it campaigns with and what it
 * calls. How the lease is kept (TTL, renewals, drift margin, retries,
 * release timeout, clock, session or plain renewals) is the keeper's
 * (KeeperOptions). The constructor checks them all.
 */
export interface ElectorOptions {
  /** This participant's identity, 1–256 printable characters, unique among the participants. Default "{hostname}-{pid}". */
  holder?: string;
  /**
   * How long before the holding's deadline the leading signal is aborted
   * (stopTime), so that work has that long to stop, ms. It must fit the
   * keeper's span (cancelBeforeFits: below the span × (1 − driftMargin) −
   * span / 2, for the session's window or the plain TTL): one that does
   * not is an InvalidArgumentError, thrown by the constructor when the
   * keeper's span is known then, else by run once the keeper's mode is
   * chosen; it is never capped. Default min(250, span / 10).
   */
  cancelBeforeMs?: number;
  /**
   * How long one acquire waits on the service for the holding of another
   * to end, 0 … 60,000 ms; a follower takes over as soon as the service
   * sees the lease free. Default 30,000. Negative disables waiting:
   * followers poll every keeper.renewIntervalMs (jittered).
   */
  waitMs?: number;
  /** A JSON object attached to the lease on every acquire. */
  metadata?: Record<string, unknown>;
  /**
   * 0 … 1000, ranks this Elector among the candidates waiting for the lease
   * (docs/contract.md §8): when a holding ends, the lease is reserved for a
   * few seconds for the best waiting candidate. With priority > 0 or
   * preempt every acquire carries it and the waiting acquires register
   * this Elector as a candidate; with neither (the default) it waits
   * unranked. Default 0.
   */
  priority?: number;
  /** The waiting acquires ask a holder whose holding has a strictly lower priority to step down. Needs waitMs ≥ 0. Nothing is taken by force. */
  preempt?: boolean;
  /** What the Elector calls: onStartedLeading (required) and the optional others. */
  callbacks: ElectorCallbacks;
  /**
   * Receives a line for every gain and loss of leadership and every
   * failed call. A keeper the Elector builds (Elector.forClient) logs to
   * it too, unless its KeeperOptions name another; without any, that
   * keeper says on stderr once per process for each change of mode how
   * the lease is held (`leasesvc: elector "x" holds through a session
   * (window 1s)`). Default: none.
   */
  logger?: ElectorLogger;
}

/**
 * @deprecated The options of `new Elector(client, name, options)`, the
 * Elector of before issue 46 that built a Keeper for each run from them:
 * use `Elector.forClient(client, name, options, keeperOptions)` (or `new
 * Elector(keeper, name, options)`), with the callbacks in
 * ElectorOptions.callbacks and ttlMs, renewIntervalMs, renewJitter,
 * driftMargin, retryBackoff, releaseTimeoutMs, session and plainRenewals
 * in KeeperOptions. Kept for one release; forwarded to exactly that.
 */
export interface LegacyElectorOptions extends Omit<ElectorOptions, "callbacks">, ElectorCallbacks {
  /** KeeperOptions.ttlMs. */
  ttlMs?: number;
  /** KeeperOptions.renewIntervalMs. */
  renewIntervalMs?: number;
  /** KeeperOptions.renewJitter. */
  renewJitter?: number;
  /** KeeperOptions.driftMargin. */
  driftMargin?: number;
  /** KeeperOptions.retryBackoff. */
  retryBackoff?: Partial<Backoff>;
  /** KeeperOptions.releaseTimeoutMs. */
  releaseTimeoutMs?: number;
  /** KeeperOptions.session. */
  session?: Session;
  /** KeeperOptions.plainRenewals. */
  plainRenewals?: boolean;
  /** The keeper to hold through (the others above are then ignored); it stays open when the Elector stops. */
  keeper?: Keeper;
}

/** Defaults of an Elector and of the keeper it builds (docs/contract.md §7). */
export const electorDefaults = Object.freeze({
  ttlMs: 30_000,
  driftMargin: 0.1,
  renewJitter: 0.1,
  waitMs: 30_000,
  releaseTimeoutMs: 5_000,
});

export const maxWaitMs = 60_000;

/** The checked options, defaults filled in but for cancelBeforeMs, which the keeper's span decides. */
export interface Resolved extends Required<Omit<ElectorCallbacks, "onStoppedLeading" | "onNewLeader" | "onRenewed" | "onYieldRequested">>, Omit<ElectorCallbacks, "onStartedLeading"> {
  holder: string;
  /** The CancelBefore given; undefined: the default for the span. */
  cancelBeforeMs: number | undefined;
  waitMs: number;
  metadata: Record<string, unknown> | undefined;
  priority: number;
  preempt: boolean;
  logger: ElectorLogger;
  /** The logger the caller gave, if any (a keeper the Elector builds warns on the console without one). */
  givenLogger: ElectorLogger | undefined;
}

export const noLogger: ElectorLogger = { info() {}, warn() {} };

function validHolder(h: string): boolean {
  const chars = [...h];
  return chars.length >= 1 && chars.length <= 256 && chars.every((c) => !/[\p{C}\p{Z}]/u.test(c) || c === " ");
}

/** resolve fills the defaults into a copy of the options and checks them, naming the field at fault. */
export function resolve(opts: ElectorOptions): Resolved {
  const cbs = opts.callbacks as ElectorCallbacks | undefined;
  if (typeof cbs?.onStartedLeading !== "function") throw new TypeError("leasesvc Elector: options.callbacks.onStartedLeading is required");
  const holder = opts.holder ?? defaultHolder();
  if (!validHolder(holder)) throw new RangeError(`leasesvc Elector: holder ${JSON.stringify(holder)} must be 1–256 printable characters`);
  const cancelBeforeMs = opts.cancelBeforeMs;
  if (cancelBeforeMs !== undefined && !(cancelBeforeMs >= 0)) throw new RangeError(`leasesvc Elector: cancelBeforeMs ${cancelBeforeMs} must not be negative`);
  const waitMs = opts.waitMs ?? electorDefaults.waitMs;
  if (!Number.isInteger(waitMs) || waitMs > maxWaitMs) throw new RangeError(`leasesvc Elector: waitMs ${waitMs} must be whole milliseconds, at most ${maxWaitMs}`);
  const priority = opts.priority ?? 0;
  if (!Number.isInteger(priority) || priority < 0 || priority > maxPriority) throw new RangeError(`leasesvc Elector: priority ${priority} must be an integer within 0 … ${maxPriority}`);
  const preempt = opts.preempt ?? false;
  if (preempt && waitMs < 0) throw new RangeError("leasesvc Elector: preempt needs waiting acquires: waitMs must not be negative");
  if (opts.metadata !== undefined && (opts.metadata === null || typeof opts.metadata !== "object" || Array.isArray(opts.metadata))) {
    throw new TypeError("leasesvc Elector: metadata must be a JSON object");
  }
  return {
    holder,
    cancelBeforeMs,
    waitMs,
    metadata: opts.metadata,
    priority,
    preempt,
    logger: opts.logger ?? noLogger,
    givenLogger: opts.logger,
    onStartedLeading: cbs.onStartedLeading,
    onStoppedLeading: cbs.onStoppedLeading,
    onNewLeader: cbs.onNewLeader,
    onRenewed: cbs.onRenewed,
    onYieldRequested: cbs.onYieldRequested,
  };
}

/**
 * keeperOptionsFor completes the options of a keeper an Elector of the
 * lease name builds: its log lines say "leasesvc elector", go to the
 * Elector's logger unless ko names one, and without either name the
 * Elector in the line on stderr that says how the lease is held.
 */
export function keeperOptionsFor(name: string, logger: ElectorLogger | undefined, ko: KeeperOptions): KeeperOptions {
  const log = ko.logger ?? logger;
  return { logPrefix: "leasesvc elector", ...ko, ...(log === undefined ? { announce: ko.announce ?? `elector ${JSON.stringify(name)}` } : { logger: log }) };
}

/**
 * splitLegacy splits the deprecated options of `new Elector(client, name,
 * options)` into the Elector's and the Keeper's (or the keeper given):
 * nothing is decided here, every field is forwarded.
 */
export function splitLegacy(o: LegacyElectorOptions): { elector: ElectorOptions; keeper: KeeperOptions | Keeper } {
  const { ttlMs, renewIntervalMs, renewJitter, driftMargin, retryBackoff, releaseTimeoutMs, session, plainRenewals, keeper } = o;
  const { onStartedLeading, onStoppedLeading, onNewLeader, onRenewed, onYieldRequested } = o;
  const elector: ElectorOptions = {
    holder: o.holder,
    cancelBeforeMs: o.cancelBeforeMs,
    waitMs: o.waitMs,
    metadata: o.metadata,
    priority: o.priority,
    preempt: o.preempt,
    logger: o.logger,
    callbacks: { onStartedLeading, onStoppedLeading, onNewLeader, onRenewed, onYieldRequested },
  };
  if (keeper !== undefined) return { elector, keeper };
  const ko: KeeperOptions = { ttlMs, renewIntervalMs, renewJitter, driftMargin, retryBackoff, releaseTimeoutMs, session, plainRenewals };
  for (const k of Object.keys(ko) as Array<keyof KeeperOptions>) if (ko[k] === undefined) delete ko[k];
  return { elector, keeper: ko };
}
