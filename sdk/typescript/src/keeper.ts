import { hostname } from "node:os";
import { type Backoff, backoffDelay, backoffWithDefaults } from "./backoff.js";
import type { Client } from "./client.js";
import { type Clock, clockSleep, systemClock } from "./clock.js";
import { RateLimitedError } from "./errors.js";
import type { Holding, HoldingDeps } from "./holding.js";
import { type HoldRequest, type PlainConfig, PlainHolding, permanent, plainSpan } from "./plainholding.js";
import { type Session, SessionEndedError, SessionLimitError, SessionsUnsupportedError } from "./session.js";
import { SessionHolding } from "./sessionholding.js";
import { useSharedSession } from "./shared.js";

/** What a Keeper logs to. */
export interface KeeperLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** How a keeper keeps its leases: through a session, or by plain renewals. */
export type KeeperMode = "session" | "plain";

/** Options of a Keeper. Every field has a default. */
export interface KeeperOptions {
  /**
   * "session" (the default): through a session, the Client's shared one
   * (opened on first hold, window 1 s) unless windowMs asks for another;
   * falls back to plain renewals, and says so in the log, when the
   * service offers no sessions, its session limit is reached, or this
   * runtime has no WebSocket (then with a warning: the logger's, or
   * console.warn once per process). "plain": plain renewals, always. A
   * Session: through it; it stays open when the keeper closes. A keeper
   * with a clock of its own (not the default) opens a session of its own
   * on that clock rather than sharing the Client's.
   */
  mode?: KeeperMode | Session;
  /** The window of a session the keeper opens itself (instead of sharing the Client's), ms. */
  windowMs?: number;
  /** The TTL of plain holdings, whole ms. Default 30,000. */
  ttlMs?: number;
  /** The fraction of the TTL given up to clock-rate differences, 0.01 … 0.5. Default 0.1. */
  driftMargin?: number;
  /** How long after a successful renewal the next is sent (less up to renewJitter of it), ms. Default ttlMs / 3. */
  renewIntervalMs?: number;
  /** The fraction of renewIntervalMs, 0 … 0.5, by which each renewal comes early at random. Default 0.1. */
  renewJitter?: number;
  /** Spaces retries of failed renewals and session opens. Default: initial min(100, TTL/30) ms, max min(5,000, TTL/6) ms, doubling. */
  retryBackoff?: Partial<Backoff>;
  /** Bounds a release or transfer, ms. Default 5,000. */
  releaseTimeoutMs?: number;
  /**
   * The monotonic clock and timers. Default: a given Session's clock, else
   * performance.now() and the global timers. A session the keeper opens
   * measures its deadlines on it too (SessionOptions.clock): a holding's
   * deadline and the clock it is compared with are one clock. A given
   * Session on another clock is refused (RangeError).
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
  /** Through a session, wait for an acknowledged heartbeat until the deadline lies more than this ahead (given the period: the window), ms. Default 0. */
  aheadMs?: (periodMs: number) => number;
}

/** defaultHolder returns "{hostname}-{pid}", the default identity. */
export function defaultHolder(): string {
  return `${hostname() || "host"}-${process.pid}`;
}

const noLogger: KeeperLogger = { info() {}, warn() {} };

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

/** How the keeper keeps: a session (shared: the Client's, reopened when it ends), or plain renewals. */
interface Via {
  session: Session | undefined;
  shared: boolean;
  owned: boolean;
  release(): void;
}

/**
 * Keeper keeps leases for one agent, like etcd's concurrency.Session
 * apart from its Election: by plain renewals (REST acquire, renew every
 * renewIntervalMs, release; deadline = send time of the last successful
 * acquire or renew + ttlMs × (1 − driftMargin)), or through a session (its
 * heartbeats keep the leases; deadline = the session's). It is the one
 * place that decides which. hold returns a Holding that tells its
 * listeners when its deadline moves and when it is lost.
 */
export class Keeper {
  readonly #client: Client;
  readonly #opts: KeeperOptions;
  readonly #clock: Clock;
  readonly #log: KeeperLogger;
  readonly #prefix: string;
  readonly #plain: PlainConfig;
  readonly #backoff: Backoff;
  readonly #releaseTimeoutMs: number;
  readonly #holdings = new Set<Holding>();
  #via: Via | undefined;
  #deciding: Promise<Via | undefined> | undefined;
  #failed: unknown;

  /** A keeper calling the service through client; it checks options and opens nothing until the first hold. */
  constructor(client: Client, opts: KeeperOptions = {}) {
    this.#client = client;
    this.#opts = opts;
    const given = typeof opts.mode === "object" ? opts.mode : undefined;
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
    if (!(renewIntervalMs > 0 && renewIntervalMs < plainSpan(ttlMs, driftMargin))) throw new RangeError(`leasesvc Keeper: renewIntervalMs ${renewIntervalMs} must be positive and below ttlMs × (1 − driftMargin)`);
    const jitter = opts.renewJitter ?? 0.1;
    if (!(jitter >= 0 && jitter <= 0.5)) throw new RangeError(`leasesvc Keeper: renewJitter ${jitter} must be within 0 … 0.5`);
    const initial = Math.max(1, Math.min(100, ttlMs / 30));
    this.#backoff = backoffWithDefaults(opts.retryBackoff, "KeeperOptions.retryBackoff", { initialMs: initial, maxMs: Math.max(initial, Math.min(5000, ttlMs / 6)), multiplier: 2 });
    this.#releaseTimeoutMs = opts.releaseTimeoutMs ?? 5_000;
    if (!(this.#releaseTimeoutMs > 0)) throw new RangeError(`leasesvc Keeper: releaseTimeoutMs ${this.#releaseTimeoutMs} must be positive`);
    this.#plain = {
      client,
      ttlMs,
      driftMargin,
      renewIntervalMs,
      renewDelay: () => renewIntervalMs - Math.random() * jitter * renewIntervalMs,
      retryDelay: (err, n) => this.retryDelay(err, n),
      attemptTimeoutMs: Math.max(1, Math.min(client.requestTimeoutMs, renewIntervalMs)),
    };
  }

  /** "session" or "plain": how the keeper keeps its leases, once its first hold decided it; undefined before. */
  get mode(): KeeperMode | undefined {
    if (this.#via === undefined) return undefined;
    return this.#via.session !== undefined ? "session" : "plain";
  }

  /** The keeper's clock. */
  get clock(): Clock {
    return this.#clock;
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

  /**
   * Acquires name and keeps it: resolves to the Holding, started, or
   * rejects with the acquire's typed error (LeaseHeldError,
   * LeaseReservedError, …). Aborting opts.signal abandons the hold and
   * releases a holding an acquire in flight obtained.
   */
  async hold(name: string, opts: HoldOptions = {}): Promise<Holding> {
    if (this.#failed !== undefined) throw this.#failed;
    const signal = opts.signal;
    const req: HoldRequest = { holder: opts.holder ?? defaultHolder(), metadata: opts.metadata, waitMs: opts.waitMs, priority: opts.priority, preempt: opts.preempt };
    for (let again = 0; ; again++) {
      const via = await this.#decide(signal);
      if (via === undefined) throw signal?.reason ?? new Error("leasesvc keeper: hold aborted");
      const s = via.session;
      const deps = this.#deps();
      try {
        const h =
          s === undefined
            ? await PlainHolding.acquire(deps, this.#plain, name, req, signal)
            : await SessionHolding.acquire(deps, s, name, req, opts.aheadMs?.(s.windowMs) ?? 0, signal);
        this.#holdings.add(h);
        h.start();
        return h;
      } catch (err) {
        if (signal?.aborted) {
          const rs = AbortSignal.timeout(this.#releaseTimeoutMs);
          if (s !== undefined) await SessionHolding.abandon(s, name, req.holder, rs);
          else await PlainHolding.abandon(this.#client, name, req.holder, rs);
          throw err;
        }
        if (!(err instanceof SessionEndedError) || s === undefined || !s.ended) throw err;
        // The session is gone with its leases: a shared one is opened anew, a given one ends the keeper.
        if (!via.shared || again > 0) {
          this.#failed ??= err;
          throw err;
        }
        this.#log.warn(`${this.#prefix}: the session ended; opening another`, { lease: name, holder: req.holder, err: String(err) });
        this.#dropVia(via);
      }
    }
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

  #dropVia(via: Via): void {
    if (this.#via === via) this.#via = undefined;
    via.release();
  }

  /** Decides (once, and again after a shared session ended) how to keep leases; undefined when signal aborts first. */
  async #decide(signal: AbortSignal | undefined): Promise<Via | undefined> {
    const v = this.#via;
    if (v !== undefined && !(v.shared && v.session?.ended === true)) return v;
    if (v !== undefined) this.#dropVia(v);
    this.#deciding ??= this.#choose(signal).finally(() => (this.#deciding = undefined));
    const via = await this.#deciding;
    if (via !== undefined) this.#via = via;
    return via;
  }

  async #choose(signal: AbortSignal | undefined): Promise<Via | undefined> {
    const o = this.#opts;
    const mode = o.mode ?? "session";
    const say = (what: string): void => {
      if (this.#log === noLogger && o.announce !== undefined) sayMode(o.announce, what);
    };
    const plain = (why: string): Via => {
      this.#log.info(`${this.#prefix}: plain renewals`, { ttlMs: this.#plain.ttlMs, why });
      say(`with plain renewals (${mode === "plain" ? "plainRenewals: true" : why})`);
      return { session: undefined, shared: false, owned: false, release() {} };
    };
    const through = (s: Session, shared: boolean, owned: boolean, release: () => void): Via => {
      this.#log.info(`${this.#prefix}: holding through a session (window ${windowText(s.windowMs)})`, { windowMs: s.windowMs });
      say(`through a session (window ${windowText(s.windowMs)})`);
      return { session: s, shared, owned, release };
    };
    if (mode === "plain") return plain("plain renewals chosen");
    if (mode !== "session") return through(mode, false, false, () => undefined);
    for (let failures = 0; ; failures++) {
      if (signal?.aborted) return undefined;
      try {
        if (o.windowMs !== undefined || this.#clock !== systemClock) {
          // Its own session: another window, or its own clock (the shared session's is the system's).
          const s = await this.#client.openSession({ ...(o.windowMs !== undefined ? { windowMs: o.windowMs } : {}), driftMargin: this.#plain.driftMargin, clock: this.#clock });
          return through(s, false, true, () => void s.close().catch(() => undefined));
        }
        const u = await useSharedSession(this.#client, () => this.#client.openSession());
        return through(u.session, true, false, u.release);
      } catch (err) {
        if (err instanceof SessionsUnsupportedError) {
          // Status 0: the runtime, not the service, has no sessions (Node 20 without ws).
          if (err.status === 0) this.#warnNoSessions(err);
          return plain(err.message);
        }
        if (err instanceof SessionLimitError) return plain(`the service's session limit is reached: ${err.message}`);
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
      `plainRenewals: true (Keeper mode "plain") to choose plain renewals.`;
    if (this.#log !== noLogger) {
      this.#log.warn(msg, { ttlMs });
      return;
    }
    if (warnedNoSessions) return;
    warnedNoSessions = true;
    console.warn(msg);
  }

  /** Releases what the keeper still holds and stops using its session (closing it if the keeper opened it). Holds after it reject. */
  async close(): Promise<void> {
    this.#failed ??= new Error("leasesvc keeper: closed");
    const live = [...this.#holdings];
    await Promise.all(live.map((h) => h.release().catch(() => undefined)));
    const v = this.#via;
    if (v !== undefined) this.#dropVia(v);
  }
}
