import { hostname } from "node:os";
import { type Backoff, backoffDelay, backoffWithDefaults } from "./backoff.js";
import type { Client } from "./client.js";
import { type Clock, clockSleep, systemClock } from "./clock.js";
import { safeSpan } from "./deadline.js";
import { RateLimitedError } from "./errors.js";
import type { HoldRequest, Holding, HoldingDeps, Keeping } from "./holding.js";
import { type PlainConfig, PlainKeeping, permanent } from "./plainholding.js";
import { type Session, SessionLimitError, SessionsUnsupportedError } from "./session.js";
import { type KeptSession, SessionKeeping } from "./sessionholding.js";
import { useSharedSession } from "./shared.js";

/** What a Keeper logs to. */
export interface KeeperLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** How a keeper keeps its leases: through a session, or by plain renewals. */
export type KeeperMode = "session" | "plain";

/**
 * Why a keeper holds by plain renewals (rule L1), stable for tools that
 * act on it: "asked" (plainRenewals: true), "sessions_unsupported" (the
 * service, or this runtime, has no sessions), "session_limit" (the service
 * refused the session at its session limit: 429), "window" (the window
 * did not fit a CancelBefore check: Go's keeper has one; this one never
 * reports it).
 */
export type PlainReason = "asked" | "sessions_unsupported" | "session_limit" | "window";

/** The mode a keeper chose, as KeeperOptions.onMode hears it once. */
export interface KeeperModeInfo {
  mode: KeeperMode;
  /** Why plain renewals; "" in session mode. */
  plainReason: PlainReason | "";
  /** The span deadlines are measured in: the session's window or the plain TTL, ms. */
  spanMs: number;
}

/** Options of a Keeper. Every field has a default. */
export interface KeeperOptions {
  /**
   * Holds with plain renewals (acquire with ttlMs, renew every
   * renewIntervalMs) instead of a session; plainReason "asked". Default
   * false: through a session, the Client's shared one (opened on first
   * hold, window 1 s) unless windowMs, clock or driftMargin ask for one of
   * its own; falling back to plain renewals, and saying so, when the
   * service offers no sessions (or this runtime has no WebSocket: then
   * with a warning, the logger's or console.warn once per process) or
   * refuses the session at its session limit.
   */
  plainRenewals?: boolean;
  /** The session to hold through (Client.openSession); it stays open when the keeper closes and is never reopened by it. */
  session?: Session;
  /** @deprecated Use plainRenewals or session: "plain" is plainRenewals: true, a Session is session. */
  mode?: KeeperMode | Session;
  /** The window of a session the keeper opens itself (instead of sharing the Client's), ms. */
  windowMs?: number;
  /** The TTL of plain holdings, whole ms. Default 30,000. */
  ttlMs?: number;
  /** The fraction of the TTL (or of the window of a session the keeper opens) given up to clock-rate differences, 0.01 … 0.5. Default 0.1. */
  driftMargin?: number;
  /** How long after a successful renewal the next is sent (less up to renewJitter of it), ms. Default ttlMs / 3. */
  renewIntervalMs?: number;
  /** The fraction of renewIntervalMs, 0 … 0.5, by which each renewal comes early at random. Default 0.1. */
  renewJitter?: number;
  /** Spaces retries of failed renewals and session opens. Default: initial min(100, TTL/30) ms, max min(5,000, TTL/6) ms, doubling. */
  retryBackoff?: Partial<Backoff>;
  /** Bounds a release or transfer (close's releases too), ms. Default 5,000. */
  releaseTimeoutMs?: number;
  /**
   * The monotonic clock and timers. Default: a given session's clock, else
   * performance.now() and the global timers. A session the keeper opens
   * measures its deadlines on it (SessionOptions.clock), and its holdings
   * run their timers on it: one clock. A given session on another clock is
   * refused (RangeError).
   */
  clock?: Clock;
  /** Receives a line for the mode chosen, every loss and every failed call. Default: none. */
  logger?: KeeperLogger;
  /** The prefix of its log lines. Default "leasesvc keeper". */
  logPrefix?: string;
  /**
   * Without a logger: who a line on stderr names when it says how the
   * leases are held (the Elector's `elector "name"`), as in `leasesvc:
   * elector "name" holds through a session (window 1s)`, once per process
   * for each change of mode (not per hold or term). Default: no such line.
   */
  announce?: string;
  /** Called once, when the mode is chosen (rule L1), with the mode and why. */
  onMode?: (info: KeeperModeInfo) => void;
}

/** Options of one hold: the acquire's. */
export interface HoldOptions {
  /** The identity to hold as. Default "{hostname}-{pid}". */
  holder?: string;
  /** A JSON object attached to the lease. */
  metadata?: Record<string, unknown>;
  /** How long the acquire waits on the service for another's holding to end, ms. Default 0. */
  waitMs?: number;
  /** The candidate's priority, 0 … 1000 (docs/contract.md §8). */
  priority?: number;
  /** Ask a lower-priority holder to step down (needs waitMs > 0). */
  preempt?: boolean;
  /** Aborting it abandons the hold (a holding granted meanwhile is released). */
  signal?: AbortSignal;
  /** Through a session, wait for an acknowledged heartbeat until the deadline lies more than this ahead (a function: of the span, the window), ms. Default 0. */
  aheadMs?: number | ((spanMs: number) => number);
}

/** defaultHolder returns "{hostname}-{pid}", the default identity. */
export function defaultHolder(): string {
  return `${hostname() || "host"}-${process.pid}`;
}

const noLogger: KeeperLogger = { info() {}, warn() {} };

/** The drift margin of the Client's shared session (SessionOptions' default). */
const sharedDriftMargin = 0.1;

/** Set once this process has been told, on the console, that its runtime cannot hold sessions. */
let warnedNoSessions = false;

/** The mode this process last said on stderr (sayMode). */
let modeSaid = "";

/** sayMode writes `leasesvc: {who} holds {what}` on stderr, unless the last such line said the same mode. */
function sayMode(who: string, what: string): void {
  if (what === modeSaid) return;
  modeSaid = what;
  console.error(`leasesvc: ${who} holds ${what}`);
}

/** windowText writes a window as the log line says it: "1s", "1.5s", "200ms". */
function windowText(ms: number): string {
  return ms >= 1000 ? `${ms / 1000}s` : `${ms}ms`;
}

/**
 * Keeper keeps leases for one agent, like etcd's concurrency.Session
 * apart from its Election: by plain renewals (REST acquire, renew every
 * renewIntervalMs, release; deadline = send time of the last successful
 * acquire or renew + ttlMs × (1 − driftMargin)), or through a session (its
 * heartbeats keep the leases; deadline = the session's). It is the one
 * place that decides which (issue 46):
 *
 * - L1: the mode is chosen once, at construction when plain renewals or a
 *   session were given, else at the first hold (or start), and kept for
 *   the keeper's life, a refusal at the session limit included (a new
 *   keeper asks again). mode and plainReason say which and why.
 * - L2: when the service ends a session the keeper opened (its own or the
 *   Client's shared one), its holdings end lost and the next hold opens a
 *   new session of the same window; the mode stays "session". A session
 *   the caller gave is not reopened: holds then fail with
 *   SessionEndedError (failed).
 * - L4: every holding it hands out is kept (plain: renewed every
 *   renewIntervalMs; session: by the heartbeats) until it is released,
 *   transferred, lost, its deadline passes or the keeper closes; close
 *   releases what is still held and stops all renewals.
 */
export class Keeper {
  readonly #client: Client;
  readonly #opts: KeeperOptions;
  readonly #clock: Clock;
  readonly #log: KeeperLogger;
  readonly #prefix: string;
  readonly #plain: PlainConfig;
  readonly #jitter: number;
  readonly #backoff: Backoff;
  readonly #releaseTimeoutMs: number;
  /** Plain renewals were asked for. */
  readonly #asked: boolean;
  readonly #given: Session | undefined;
  readonly #holdings = new Set<Holding>();
  #keeping: Keeping | undefined;
  #reason: PlainReason | "" = "";
  #choosing: Promise<Keeping | undefined> | undefined;
  #failed: unknown;
  #closed = false;

  /** A keeper calling the service through client; it checks options and opens nothing until the first hold (or start). */
  constructor(client: Client, opts: KeeperOptions = {}) {
    this.#client = client;
    this.#opts = opts;
    const legacy = opts.mode;
    if (legacy !== undefined && legacy !== "session" && legacy !== "plain" && typeof legacy !== "object") {
      throw new RangeError(`leasesvc Keeper: mode ${JSON.stringify(legacy)} must be "session", "plain" or a Session`);
    }
    this.#asked = opts.plainRenewals === true || legacy === "plain";
    this.#given = opts.session ?? (typeof legacy === "object" ? legacy : undefined);
    if (this.#asked && this.#given !== undefined) throw new RangeError("leasesvc Keeper: plainRenewals and a session exclude each other");
    if (opts.session !== undefined && typeof legacy === "object" && legacy !== opts.session) throw new RangeError("leasesvc Keeper: session and mode name two sessions");
    const given = this.#given;
    if (given !== undefined && opts.clock !== undefined && opts.clock !== given.clock) {
      throw new RangeError("leasesvc Keeper: clock must be the given session's (SessionOptions.clock): a holding's deadline is measured on it");
    }
    this.#clock = opts.clock ?? given?.clock ?? systemClock;
    this.#log = opts.logger ?? noLogger;
    this.#prefix = opts.logPrefix ?? "leasesvc keeper";
    const ttlMs = opts.ttlMs ?? 30_000;
    if (!Number.isInteger(ttlMs) || ttlMs < 1) throw new RangeError(`leasesvc Keeper: ttlMs ${ttlMs} must be a positive whole number of milliseconds`);
    const driftMargin = opts.driftMargin ?? 0.1;
    if (!(driftMargin >= 0.01 && driftMargin <= 0.5)) throw new RangeError(`leasesvc Keeper: driftMargin ${driftMargin} must be within 0.01 … 0.5`);
    const renewIntervalMs = opts.renewIntervalMs ?? ttlMs / 3;
    if (!(renewIntervalMs > 0 && renewIntervalMs < safeSpan(ttlMs, driftMargin))) throw new RangeError(`leasesvc Keeper: renewIntervalMs ${renewIntervalMs} must be positive and below ttlMs × (1 − driftMargin)`);
    const jitter = opts.renewJitter ?? 0.1;
    if (!(jitter >= 0 && jitter <= 0.5)) throw new RangeError(`leasesvc Keeper: renewJitter ${jitter} must be within 0 … 0.5`);
    this.#jitter = jitter;
    const initial = Math.max(1, Math.min(100, ttlMs / 30));
    this.#backoff = backoffWithDefaults(opts.retryBackoff, "KeeperOptions.retryBackoff", { initialMs: initial, maxMs: Math.max(initial, Math.min(5000, ttlMs / 6)), multiplier: 2 });
    this.#releaseTimeoutMs = opts.releaseTimeoutMs ?? 5_000;
    if (!(this.#releaseTimeoutMs > 0)) throw new RangeError(`leasesvc Keeper: releaseTimeoutMs ${this.#releaseTimeoutMs} must be positive`);
    this.#plain = {
      client,
      ttlMs,
      driftMargin,
      renewIntervalMs,
      renewDelay: () => this.pollDelay(),
      retryDelay: (err, n) => this.retryDelay(err, n),
      attemptTimeoutMs: Math.max(1, Math.min(client.requestTimeoutMs, renewIntervalMs)),
    };
    // Nothing to ask the service: the mode is known now.
    if (this.#asked) this.#settle(new PlainKeeping(this.#plain), "asked", "plain renewals chosen");
    else if (given !== undefined) this.#settle(new SessionKeeping({ session: given, release() {} }, undefined), "", "");
  }

  /** "session" or "plain": how the keeper keeps its leases, once chosen (rule L1); undefined before. */
  get mode(): KeeperMode | undefined {
    return this.#keeping?.mode;
  }

  /** Why the keeper holds by plain renewals (PlainReason); "" in session mode and before the mode is chosen. */
  get plainReason(): PlainReason | "" {
    return this.#reason;
  }

  /**
   * The span its holdings' deadlines are measured in (spanMs: the
   * session's window or the plain TTL; name: "session window" or "TTL")
   * and its drift margin, once the mode is chosen; undefined before.
   */
  get span(): { spanMs: number; driftMargin: number; name: string } | undefined {
    const k = this.#keeping;
    return k === undefined ? undefined : { spanMs: k.spanMs, driftMargin: k.driftMargin, name: k.spanName };
  }

  /** The keeper's clock: its holdings' deadlines are on it. */
  get clock(): Clock {
    return this.#clock;
  }

  /** The TTL of plain holdings, ms. */
  get ttlMs(): number {
    return this.#plain.ttlMs;
  }

  /** The renewal interval of plain holdings before jitter, ms. */
  get renewIntervalMs(): number {
    return this.#plain.renewIntervalMs;
  }

  /** The fraction of renewIntervalMs by which a renewal comes early at random. */
  get renewJitter(): number {
    return this.#jitter;
  }

  /** The drift margin of plain holdings and of sessions the keeper opens. */
  get driftMargin(): number {
    return this.#plain.driftMargin;
  }

  /** Bounds a release or transfer, ms. */
  get releaseTimeoutMs(): number {
    return this.#releaseTimeoutMs;
  }

  /** Why the keeper can hold nothing more (closed, or the session it was given ended); undefined while it can. */
  get failed(): unknown {
    return this.#failed;
  }

  /** The backoff before retry n after err, or a 429's Retry-After when longer. */
  retryDelay(err: unknown, n: number): number {
    const d = backoffDelay(this.#backoff, n);
    if (err instanceof RateLimitedError && err.retryAfterMs > d) return err.retryAfterMs;
    return d;
  }

  /** renewIntervalMs less up to renewJitter of it, at random: when a plain renewal (or a follower's poll) is due next. */
  pollDelay(): number {
    const d = this.#plain.renewIntervalMs;
    return d - Math.random() * this.#jitter * d;
  }

  /**
   * Chooses the mode now, if the first hold has not (rule L1): opens the
   * session (or finds the service has none) and resolves to the mode.
   * Rejects when signal aborts first, when the keeper is closed, and with
   * a permanent refusal (credentials, a bad window).
   */
  async start(signal?: AbortSignal): Promise<KeeperMode> {
    const k = await this.#keepingFor(signal);
    if (k === undefined) throw signal?.reason ?? new Error("leasesvc keeper: start aborted");
    return k.mode;
  }

  /**
   * Acquires name and keeps it (rule L4): resolves to the Holding,
   * started, or rejects with the acquire's typed error (LeaseHeldError,
   * LeaseReservedError, …). Aborting opts.signal abandons the hold and
   * releases a holding an acquire in flight obtained.
   */
  async hold(name: string, opts: HoldOptions = {}): Promise<Holding> {
    const signal = opts.signal;
    const req: HoldRequest = { holder: opts.holder ?? defaultHolder(), metadata: opts.metadata, waitMs: opts.waitMs, priority: opts.priority, preempt: opts.preempt };
    const k = await this.#keepingFor(signal);
    if (k === undefined) throw signal?.reason ?? new Error("leasesvc keeper: hold aborted");
    const ahead = typeof opts.aheadMs === "function" ? opts.aheadMs(k.spanMs) : (opts.aheadMs ?? 0);
    let h: Holding;
    try {
      h = await k.acquire(this.#deps(), name, req, ahead, signal);
    } catch (err) {
      if (signal?.aborted) {
        await k.abandon(name, req.holder, AbortSignal.timeout(this.#releaseTimeoutMs));
        throw err;
      }
      if (k.failed !== undefined) this.#failed ??= k.failed;
      throw err;
    }
    if (this.#closed) {
      // Closed while the acquire was in flight: what close would have released.
      await h.release().catch(() => undefined);
      throw this.#failed;
    }
    this.#holdings.add(h);
    h.start();
    return h;
  }

  #deps(): HoldingDeps {
    return {
      clock: this.#clock,
      logger: this.#log,
      logPrefix: this.#prefix,
      releaseTimeoutMs: this.#releaseTimeoutMs,
      done: (h) => void this.#holdings.delete(h),
    };
  }

  /** The keeping, chosen once (rule L1); undefined when signal aborts first. */
  async #keepingFor(signal: AbortSignal | undefined): Promise<Keeping | undefined> {
    for (;;) {
      if (this.#failed !== undefined) throw this.#failed;
      if (this.#keeping !== undefined) return this.#keeping;
      if (signal?.aborted) return undefined;
      // A choice begun by a hold whose signal aborted gives up: the next caller chooses anew.
      await (this.#choosing ??= this.#choose(signal).finally(() => (this.#choosing = undefined)));
    }
  }

  /** Takes k as the keeper's way of keeping for good, says so, and returns it. */
  #settle(k: Keeping, reason: PlainReason | "", why: string): Keeping {
    this.#keeping = k;
    this.#reason = reason;
    const o = this.#opts;
    const say = (what: string): void => {
      if (this.#log === noLogger && o.announce !== undefined) sayMode(o.announce, what);
    };
    if (k.mode === "plain") {
      this.#log.info(`${this.#prefix}: plain renewals`, { ttlMs: k.spanMs, plainReason: reason, why });
      say(`with plain renewals (${reason === "asked" ? "plainRenewals: true" : why})`);
    } else {
      this.#log.info(`${this.#prefix}: holding through a session (window ${windowText(k.spanMs)})`, { windowMs: k.spanMs });
      say(`through a session (window ${windowText(k.spanMs)})`);
    }
    try {
      o.onMode?.({ mode: k.mode, plainReason: reason, spanMs: k.spanMs });
    } catch (err) {
      this.#log.warn(`${this.#prefix}: onMode failed`, { err: String(err) });
    }
    if (this.#closed) k.close(); // closed while the session opened
    return k;
  }

  /** Opens the session the keeper holds through: its own (another window, clock or drift margin than the shared one's), or the Client's shared one. */
  async #openSession(): Promise<KeptSession> {
    const o = this.#opts;
    const dm = this.#plain.driftMargin;
    if (o.windowMs !== undefined || this.#clock !== systemClock || dm !== sharedDriftMargin) {
      const s = await this.#client.openSession({ ...(o.windowMs !== undefined ? { windowMs: o.windowMs } : {}), driftMargin: dm, clock: this.#clock });
      return { session: s, release: () => void s.close().catch(() => undefined) };
    }
    return await useSharedSession(this.#client, () => this.#client.openSession({ clock: systemClock }));
  }

  /** The first hold's choice: a session unless the service (or runtime) has none or refuses one at its limit; undefined when signal aborts first. */
  async #choose(signal: AbortSignal | undefined): Promise<Keeping | undefined> {
    for (let failures = 0; ; failures++) {
      if (signal?.aborted || this.#closed) return undefined;
      try {
        const first = await this.#openSession();
        const reopen = (): Promise<KeptSession> => {
          this.#log.warn(`${this.#prefix}: the session ended; opening another`, { windowMs: first.session.windowMs });
          return this.#openSession();
        };
        return this.#settle(new SessionKeeping(first, reopen), "", "");
      } catch (err) {
        if (err instanceof SessionsUnsupportedError) {
          // Status 0: the runtime, not the service, has no sessions (Node 20 without ws).
          if (err.status === 0) this.#warnNoSessions(err);
          return this.#settle(new PlainKeeping(this.#plain), "sessions_unsupported", err.message);
        }
        if (err instanceof SessionLimitError) return this.#settle(new PlainKeeping(this.#plain), "session_limit", `the service's session limit is reached: ${err.message}`);
        if (permanent(err)) throw err;
        this.#log.warn(`${this.#prefix}: opening the session failed`, { err: String(err) });
        if (!(await clockSleep(this.#clock, this.retryDelay(err, failures), signal))) return undefined;
      }
    }
  }

  /**
   * Says that this runtime cannot hold a session (no WebSocket: Node 20
   * without the ws package), so leases are renewed plainly and a crashed
   * holder's lease is taken over after its TTL, not within a session's
   * window: to the logger as a warning, or, without one, once per process
   * with console.warn. Choosing plain renewals says nothing.
   */
  #warnNoSessions(err: Error): void {
    const ttlMs = this.#plain.ttlMs;
    const msg =
      `${this.#prefix}: sessions are unavailable (${err.message}); holding leases with plain renewals, so a crashed ` +
      `leader's lease is taken over after its TTL (${ttlMs} ms), not within a session's window (1 s). Install ws, or pass ` +
      `plainRenewals: true (KeeperOptions) to choose plain renewals.`;
    if (this.#log !== noLogger) {
      this.#log.warn(msg, { ttlMs });
      return;
    }
    if (warnedNoSessions) return;
    warnedNoSessions = true;
    console.warn(msg);
  }

  /**
   * Releases every holding the keeper still holds (each bounded by
   * releaseTimeoutMs), which stops their renewals, and stops using its
   * session (closing one it opened). Holds after it reject. Idempotent.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#failed ??= new Error("leasesvc keeper: closed");
    const live = [...this.#holdings];
    await Promise.all(live.map((h) => h.release().catch(() => h.drop())));
    this.#keeping?.close();
  }
}
