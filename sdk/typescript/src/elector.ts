import { hostname } from "node:os";
import { performance } from "node:perf_hooks";
import { type Backoff, backoffDelay, backoffWithDefaults, sleep } from "./backoff.js";
import type { Client } from "./client.js";
import { LeaseHeldError, LeaseLostError, LeaseReservedError, RateLimitedError } from "./errors.js";
import { type Lease, validName } from "./lease.js";
import { type Session, SessionEndedError, SessionLimitError, SessionsUnsupportedError } from "./session.js";
import { useSharedSession } from "./shared.js";
import { Term, type TermHost, permanent } from "./term.js";

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
/** The largest checkpoint, as compact JSON, the service stores, in bytes. */
export const maxCheckpointBytes = 16 << 10;

function checkCheckpoint(v: unknown): Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new TypeError("leasesvc: a checkpoint must be a JSON object");
  const n = Buffer.byteLength(JSON.stringify(v), "utf8");
  if (n > maxCheckpointBytes) throw new RangeError(`leasesvc: the checkpoint is ${n} bytes, more than ${maxCheckpointBytes}`);
  return v as Record<string, unknown>;
}

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
  /** Receives a line for every gain and loss of leadership and every failed call. Default: none. */
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
}

/** Defaults of ElectorOptions (docs/contract.md §7). */
export const electorDefaults = Object.freeze({
  ttlMs: 30_000,
  driftMargin: 0.1,
  renewJitter: 0.1,
  waitMs: 30_000,
  releaseTimeoutMs: 5_000,
});

const maxWaitMs = 60_000;
/** The timer slack: the fraction of the TTL (at most maxTimerSlackMs) by which the deadline timer is armed early. */
const timerSlackFraction = 0.1;
const maxTimerSlackMs = 500;

/** The checked options, defaults filled in. */
type Resolved = Required<Omit<ElectorOptions, "metadata" | "logger" | "onStoppedLeading" | "onNewLeader" | "onRenewed" | "retryBackoff" | "onYieldRequested" | "session">> &
  Pick<ElectorOptions, "metadata" | "onStoppedLeading" | "onNewLeader" | "onRenewed" | "onYieldRequested" | "session"> & { retryBackoff: Backoff; logger: ElectorLogger };

/** How a run holds its lease: through session, or with plain renewals (session undefined). */
interface Via {
  session: Session | undefined;
  /** The Client's shared session (reopened when it ends), not one the caller gave. */
  shared: boolean;
  /** Stops using the session. */
  release(): void;
}

const noLogger: ElectorLogger = { info() {}, warn() {} };

/** Set once this process has been told, on the console, that its runtime cannot hold sessions. */
let warnedNoSessions = false;

/**
 * warnNoSessions says that this runtime cannot hold a session (it has no
 * WebSocket: Node 20 without the ws package), so the Elector renews
 * plainly and a crashed leader's lease is taken over after its TTL, not
 * within the session's window: to the Elector's logger as a warning, or,
 * without one, once per process with console.warn. The Elector still
 * starts (a session is an optimisation of takeover, not of safety);
 * plainRenewals: true chooses plain renewals and says nothing.
 */
function warnNoSessions(o: Resolved, f: Record<string, unknown>, err: Error): void {
  const msg = `leasesvc elector: sessions are unavailable (${err.message}); holding leases with plain renewals, so a crashed ` +
    `leader's lease is taken over after its TTL (${o.ttlMs} ms), not within a session's window (1 s). Install ws, or pass ` +
    `plainRenewals: true to choose plain renewals.`;
  if (o.logger !== noLogger) {
    o.logger.warn(msg, { ...f, ttlMs: o.ttlMs });
    return;
  }
  if (warnedNoSessions) return;
  warnedNoSessions = true;
  console.warn(msg);
}

/** defaultHolder returns "{hostname}-{pid}", the default identity. */
export function defaultHolder(): string {
  return `${hostname() || "host"}-${process.pid}`;
}

function validHolder(h: string): boolean {
  const chars = [...h];
  return chars.length >= 1 && chars.length <= 256 && chars.every((c) => !/[\p{C}\p{Z}]/u.test(c) || c === " ");
}

/**
 * Elector campaigns for one lease and keeps it while this process leads,
 * like the Go SDK's client.Elector.
 *
 * run() campaigns until its signal is aborted: it acquires the lease,
 * waiting on the service (waitMs) while another holds it; once leader it
 * calls onStartedLeading(signal, token), renews every renewIntervalMs (with
 * jitter), and ends the term — aborting the leading signal — at once when a
 * renew answers lease_lost, and before the safe deadline when renewals fail
 * for any reason (timeouts, 5xx, an unreachable service). After a lost term
 * it campaigns again. When run's signal is aborted it aborts the leading
 * signal, keeps renewing until onStartedLeading has returned, releases the
 * lease so a follower takes over at once, calls onStoppedLeading and
 * resolves.
 *
 * Guarantees and limits: the safe deadline is (performance.now() when the
 * last successful acquire or renew was sent) + ttlMs × (1 − driftMargin);
 * the service decided that holding's expiry after that send, so no other
 * holder can start before it, provided the clocks run at rates within
 * driftMargin of each other and this process is not paused. The leading
 * signal is aborted by a timer armed at the safe deadline − cancelBeforeMs −
 * a timer slack of 10% of the TTL (at most 500 ms), so that a timer that
 * fires late (a busy event loop, a loaded machine: up to 85 ms was
 * measured) still ends leadership before the safe deadline. Local time and
 * server times are never compared. A process that is paused, or
 * whose event loop is blocked, can still act after its deadline: that is
 * why every write downstream must carry the fencing token, and downstream
 * systems must refuse tokens lower than the highest they have seen.
 *
 * Sessions (docs/contract.md §14): by default the Elector holds its lease
 * through a session, the Client's shared one unless options.session names
 * another, and logs which it uses ("holding through a session (window
 * 1s)" or "plain renewals"; a service without sessions gets plain
 * renewals). Through a session it sends no renewals: the session's
 * heartbeats keep the lease, the service frees it within the window when
 * this process dies, and each term ends at the session's deadline (the
 * send time of its last acknowledged heartbeat + window × (1 −
 * driftMargin), less cancelBeforeMs and a timer slack of 10% of the
 * window) whatever the socket says, at once on a lost or revoked push, and
 * steps down on a yield push as on yieldRequested.
 */
export class Elector {
  readonly #client: Client;
  readonly #name: string;
  readonly #o: Resolved;
  /** ttlMs × (1 − driftMargin) − cancelBeforeMs − timer slack. */
  readonly #span: number;
  #running = false;
  #leading = false;
  #token = 0;
  #leaderHolder = "";
  #leaderToken = 0;
  /** The term checkpoints and transfers act on, until onStartedLeading has returned. */
  #term: Term | undefined;
  /** The current or last term. */
  #lastTerm: Term | undefined;
  /** How the running campaign holds the lease. */
  #via: Via | undefined;
  /** The safe span (without slack) of the current or last term: ttlMs or the session's window × (1 − driftMargin). */
  #lastSafeSpan = 0;

  /** Returns an Elector for the lease name, calling the service through client. It checks options and does not modify them. */
  constructor(client: Client, name: string, options: ElectorOptions) {
    if (!validName(name)) {
      throw new TypeError(`leasesvc Elector: lease name ${JSON.stringify(name)} must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit`);
    }
    this.#client = client;
    this.#name = name;
    this.#o = resolve(options);
    this.#span = safeSpan(this.#o) - this.#o.cancelBeforeMs - timerSlack(this.#o.ttlMs);
  }

  /** This Elector's identity. */
  get holder(): string {
    return this.#o.holder;
  }

  /** Whether this Elector leads now: its term has begun and its leading signal is not aborted. */
  get isLeader(): boolean {
    return this.#leading;
  }

  /** The fencing token of the current term while leading; 0 otherwise. Pass it with every write downstream. */
  get token(): number {
    return this.#leading ? this.#token : 0;
  }

  /** The holder and fencing token last seen leading, this Elector's own included; empty before any was seen. */
  get leader(): { holder: string; fencingToken: number } {
    return { holder: this.#leaderHolder, fencingToken: this.#leaderToken };
  }

  /** performance.now() when the acquire or renew that last succeeded in this (or the last) term was sent; 0 before any. */
  get lastSentAt(): number {
    return this.#lastTerm?.sentAt ?? 0;
  }

  /** The safe deadline of the current (or last) term on performance.now(): lastSentAt + ttlMs × (1 − driftMargin). */
  get safeDeadline(): number {
    const at = this.lastSentAt;
    return at === 0 ? 0 : at + (this.#lastSafeSpan || safeSpan(this.#o));
  }

  /** The options in force, defaults filled in. */
  get options(): Readonly<{ ttlMs: number; renewIntervalMs: number; driftMargin: number; renewJitter: number; waitMs: number; cancelBeforeMs: number }> {
    const o = this.#o;
    return { ttlMs: o.ttlMs, renewIntervalMs: o.renewIntervalMs, driftMargin: o.driftMargin, renewJitter: o.renewJitter, waitMs: o.waitMs, cancelBeforeMs: o.cancelBeforeMs };
  }

  /** The term checkpoints and transfers act on. */
  #openTerm(): Term {
    const t = this.#term;
    if (t === undefined) throw new NotLeadingError();
    if (t.closed !== undefined) throw new NotLeadingError("the holding is over: " + String(t.closed));
    return t;
  }

  /**
   * Records v, a JSON object of at most 16 KiB, as the checkpoint of the
   * current term (docs/contract.md §8). It is written with the next renew,
   * or with the release or transfer that ends the term if that comes first,
   * and the next holder inherits it (TermInfo.checkpoint). A later call
   * replaces a checkpoint not yet written. It costs no request. It may be
   * called until onStartedLeading returns, also after a graceful stop or a
   * step-down aborted the leading signal (the release then carries it).
   * Without a term, or once the holding is lost: NotLeadingError.
   */
  setCheckpoint(v: Record<string, unknown>): void {
    const cp = checkCheckpoint(v);
    const t = this.#openTerm();
    t.pending = cp;
    t.gen++;
  }

  /**
   * setCheckpoint, then writes the checkpoint at once with a renew of the
   * holding; resolves to the renew's answer once the service stored it, so
   * that a successor inherits it even if this process dies now. When the
   * renew fails, it rejects and the checkpoint stays pending (the next
   * renew, or the release, sends it).
   */
  async checkpoint(v: Record<string, unknown>, opts: { signal?: AbortSignal } = {}): Promise<Lease> {
    this.setCheckpoint(v);
    const t = this.#term!;
    const gen = t.gen;
    const l = await t.write(t.pending, { signal: opts.signal, timeoutMs: this.#attemptTimeout() });
    if (t.gen === gen) t.pending = undefined;
    return l;
  }

  /**
   * Hands the holding over to the holder to (docs/contract.md §8): the
   * service ends the holding now, writes checkpoint (omitted: the pending
   * one of setCheckpoint, if any) and reserves the lease for to for
   * opts.reserveMs (default the service's 5,000), so that to's acquire gets
   * the next fencing token and the checkpoint. Stop acting as leader before
   * calling it: to may begin as soon as the service answered. On success the
   * leading signal is aborted with a TransferredError, no release follows,
   * and once onStartedLeading has returned the Elector campaigns again as a
   * follower. It may be called from onStartedLeading. On failure the term
   * goes on, unless the holding was lost.
   */
  async transfer(to: string, checkpoint?: Record<string, unknown>, opts: { reserveMs?: number; signal?: AbortSignal } = {}): Promise<Lease> {
    if (to === "" || to === this.#o.holder) throw new RangeError(`leasesvc Elector.transfer: the successor ${JSON.stringify(to)} must be another holder than ${JSON.stringify(this.#o.holder)}`);
    const cp = checkpoint === undefined ? undefined : checkCheckpoint(checkpoint);
    const t = this.#openTerm();
    const req = { holder: this.#o.holder, fencingToken: t.token, to, checkpoint: cp ?? t.pending, reserveMs: opts.reserveMs };
    const signal = opts.signal ?? AbortSignal.timeout(this.#o.releaseTimeoutMs);
    const l = t.session !== undefined ? await t.session.transfer(this.#name, req, { signal }) : await this.#client.transfer(this.#name, req, { signal });
    t.pending = undefined;
    t.transferred(to, new TransferredError(to));
    return l;
  }

  /**
   * Campaigns and leads until signal is aborted, as the class's doc says,
   * then resolves. It rejects at once when the service refuses the
   * Elector's requests for good (InvalidArgumentError, DeniedError: a TTL
   * out of the service's bounds, credentials refused) and when run is
   * already running. A token provider that fails is retried like an
   * unreachable service.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.#running) throw new Error("leasesvc Elector.run: already running");
    this.#running = true;
    try {
      const via = await this.#holdVia(signal);
      if (via === undefined) return;
      this.#via = via;
      for (;;) {
        const got = await this.#campaign(signal);
        if (got === undefined) return;
        if (await this.#lead(signal, got.lease, got.sent)) return;
      }
    } finally {
      this.#via?.release();
      this.#via = undefined;
      this.#running = false;
    }
  }

  /**
   * Decides how this run holds the lease (options.plainRenewals, options.session,
   * or the Client's shared session, falling back to plain renewals on a
   * service without sessions or at its session limit) and logs it; resolves to undefined when
   * signal is aborted first. A service that cannot be reached is retried.
   */
  async #holdVia(signal?: AbortSignal): Promise<Via | undefined> {
    const o = this.#o;
    const f = { lease: this.#name, holder: o.holder };
    const plain = (why: string): Via => {
      o.logger.info("leasesvc elector: plain renewals", { ...f, ttlMs: o.ttlMs, why });
      return { session: undefined, shared: false, release() {} };
    };
    if (o.plainRenewals) return plain("plainRenewals");
    if (o.session !== undefined) {
      o.logger.info(`leasesvc elector: holding through a session (window ${windowText(o.session.windowMs)})`, { ...f, windowMs: o.session.windowMs });
      return { session: o.session, shared: false, release() {} };
    }
    for (let failures = 0; ; failures++) {
      if (signal?.aborted) return undefined;
      try {
        const u = await useSharedSession(this.#client, () => this.#client.openSession());
        o.logger.info(`leasesvc elector: holding through a session (window ${windowText(u.session.windowMs)})`, { ...f, windowMs: u.session.windowMs });
        return { session: u.session, shared: true, release: u.release };
      } catch (err) {
        if (err instanceof SessionsUnsupportedError) {
          // Status 0: the runtime, not the service, has no sessions (Node 20 without ws).
          if (err.status === 0) warnNoSessions(o, f, err);
          return plain(err.message);
        }
        if (err instanceof SessionLimitError) return plain(`the service's session limit is reached: ${err.message}`); // asked again on the next run
        if (permanent(err)) throw err;
        o.logger.warn("leasesvc elector: opening the session failed", { ...f, err: String(err) });
        if (!(await sleep(this.#retryDelay(err, failures), signal))) return undefined;
      }
    }
  }

  /** The safe span of a term through s, as the leading signal's timer uses it: window × (1 − driftMargin) − cancelBeforeMs − timer slack. */
  #sessionSpan(s: Session): number {
    return s.windowMs * (1 - s.driftMargin) - this.#o.cancelBeforeMs - timerSlack(s.windowMs);
  }

  /**
   * One acquire through the session: resolves to the holding and the send
   * time of the session's last acknowledged heartbeat once the session
   * vouches for it, to undefined to campaign on (no heartbeat acknowledged
   * in time), and throws as the acquire does.
   */
  async #acquireThrough(s: Session, signal: AbortSignal | undefined, waitMs: number): Promise<{ lease: Lease; sent: number } | undefined> {
    const o = this.#o;
    const ranked = o.priority > 0 || o.preempt;
    const l = await s.acquire(this.#name, { holder: o.holder, metadata: o.metadata, waitMs, priority: ranked ? o.priority : undefined, preempt: o.preempt && waitMs > 0 }, { signal });
    this.#observe(l);
    const span = this.#sessionSpan(s);
    // Lead only while the session's deadline lies ahead; wait a window for an acknowledged heartbeat otherwise.
    const until = performance.now() + s.windowMs;
    while (s.lastAckSentAt + span <= performance.now()) {
      if (s.ended || performance.now() >= until) return undefined;
      if (!(await sleep(Math.max(1, s.heartbeatMs / 4), signal))) return undefined;
    }
    if (s.heldToken(this.#name, o.holder) !== l.fencingToken) return undefined; // lost meanwhile
    return { lease: l, sent: s.lastAckSentAt };
  }

  #observe(l: Lease): void {
    if (!l.held) return;
    const changed = l.holder !== this.#leaderHolder;
    this.#leaderHolder = l.holder;
    this.#leaderToken = l.fencingToken;
    if (changed) this.#o.onNewLeader?.(l.holder);
  }

  #jittered(d: number): number {
    return d - Math.random() * this.#o.renewJitter * d;
  }

  /** The backoff, or a 429's Retry-After when longer (the caller's own rate limit refuses anything sooner). */
  #retryDelay(err: unknown, failures: number): number {
    const d = backoffDelay(this.#o.retryBackoff, failures);
    if (err instanceof RateLimitedError && err.retryAfterMs > d) return err.retryAfterMs;
    return d;
  }

  /** One renew attempt may not use up the time left for the next. */
  #attemptTimeout(): number {
    return Math.max(1, Math.min(this.#client.requestTimeoutMs, this.#o.renewIntervalMs));
  }

  /** Acquires the lease; resolves to it and the time its acquire (or confirming renew) was sent, or to undefined when signal aborts. */
  async #campaign(signal?: AbortSignal): Promise<{ lease: Lease; sent: number } | undefined> {
    const o = this.#o;
    let failures = 0;
    // The first acquire, and the first after a failure, does not wait: the
    // answer says at once who leads. The next ones wait on the service.
    let wait = false;
    for (;;) {
      if (signal?.aborted) return undefined;
      const sent = performance.now();
      const s = this.#via?.session;
      try {
        const waitMs = wait ? Math.max(0, o.waitMs) : 0;
        if (s !== undefined) {
          const got = await this.#acquireThrough(s, signal, waitMs);
          if (got !== undefined) return got;
          if (signal?.aborted) {
            await this.#abandon();
            return undefined;
          }
          if (!(await sleep(this.#retryDelay(undefined, failures), signal))) return undefined;
          failures++;
          continue;
        }
        const ranked = o.priority > 0 || o.preempt;
        const l = await this.#client.acquire(
          this.#name,
          { holder: o.holder, ttlMs: o.ttlMs, metadata: o.metadata, waitMs, priority: ranked ? o.priority : undefined, preempt: o.preempt && waitMs > 0 },
          { signal, maxAttempts: 1 },
        );
        this.#observe(l);
        if (performance.now() - sent <= o.renewIntervalMs / 2) return { lease: l, sent };
        // The acquire waited on the service: the holding began well after
        // it was sent. A renew sent now gives a deadline not mostly spent.
        const now = performance.now();
        try {
          const r = await this.#client.renew(this.#name, { holder: o.holder, fencingToken: l.fencingToken }, { signal, maxAttempts: 1, timeoutMs: this.#attemptTimeout() });
          // The checkpoint survives its holding: keep what the acquire inherited.
          return { lease: r.checkpoint === null ? { ...r, checkpoint: l.checkpoint, checkpointToken: l.checkpointToken } : r, sent: now };
        } catch (err) {
          if (signal?.aborted) {
            await this.#abandon();
            return undefined;
          }
          if (err instanceof LeaseLostError) continue; // it ran out meanwhile
          return { lease: l, sent }; // lead on the acquire's deadline, however short
        }
      } catch (err) {
        if (signal?.aborted) {
          await this.#abandon();
          return undefined;
        }
        if (err instanceof LeaseHeldError || err instanceof LeaseReservedError) {
          failures = 0;
          this.#observe(err.lease);
          if (o.waitMs > 0 && (!wait || performance.now() - sent >= o.waitMs / 10)) {
            wait = true;
            continue; // wait on the service now, or again
          }
          if (!(await sleep(this.#jittered(o.renewIntervalMs), signal))) return undefined;
          continue;
        }
        if (permanent(err)) throw err;
        if (err instanceof SessionEndedError && this.#via !== undefined) {
          // The session is gone with its leases: a shared one is opened anew, a given one ends the run.
          if (!this.#via.shared) throw err;
          o.logger.warn("leasesvc elector: the session ended; opening another", { lease: this.#name, holder: o.holder, err: String(err) });
          this.#via.release();
          const via = await this.#holdVia(signal);
          this.#via = via ?? { session: undefined, shared: false, release() {} };
          if (via === undefined) return undefined;
          continue;
        }
        wait = false;
        o.logger.warn("leasesvc elector: acquire failed", { lease: this.#name, holder: o.holder, err: String(err) });
        if (!(await sleep(this.#retryDelay(err, failures), signal))) return undefined;
        failures++;
      }
    }
  }

  /** Releases a holding that an acquire abandoned in flight may have obtained without this Elector hearing of it. */
  async #abandon(): Promise<void> {
    const s = AbortSignal.timeout(this.#o.releaseTimeoutMs);
    const session = this.#via?.session;
    if (session !== undefined) {
      const token = session.heldToken(this.#name, this.#o.holder);
      if (token > 0) await session.release(this.#name, this.#o.holder, token, { signal: s }).catch(() => undefined);
      return;
    }
    try {
      const l = await this.#client.get(this.#name, { signal: s });
      if (l.held && l.holder === this.#o.holder) {
        await this.#client.release(this.#name, this.#o.holder, l.fencingToken, { signal: s, maxAttempts: 2 });
      }
    } catch {
      // Best effort: the holding runs out at its expiry.
    }
  }

  /**
   * Runs one term of leadership for the holding l, acquired or renewed by a
   * request sent at sent: it starts onStartedLeading, lets the term renew,
   * and decides when to stop leading (a graceful stop, a step-down, a
   * resignation). Resolves to true when run should return (a graceful stop
   * or a resignation), false to campaign again.
   */
  #lead(parent: AbortSignal | undefined, l: Lease, sent: number): Promise<boolean> {
    const o = this.#o;
    const token = l.fencingToken;
    const session = this.#via?.session;
    const span = session !== undefined ? this.#sessionSpan(session) : this.#span;
    this.#lastSafeSpan = session !== undefined ? session.windowMs * (1 - session.driftMargin) : 0;
    if (performance.now() >= sent + span) return Promise.resolve(false); // too late to lead on this holding
    return new Promise<boolean>((resolveTerm) => {
      const leading = new AbortController();
      /** Why this leader stops leading while its term could go on. */
      let why: "leading" | "graceful" | "yielded" | "resigned" = "leading";
      let yieldAsked = false;
      const end = (reason: unknown): void => {
        this.#leading = false;
        if (!leading.signal.aborted) leading.abort(reason);
      };
      const host: TermHost = {
        client: this.#client,
        name: this.#name,
        holder: o.holder,
        logger: o.logger,
        spanMs: span,
        session,
        yieldRequested: (to) => {
          if (why !== "graceful" && !leading.signal.aborted) askYield(to);
        },
        releaseTimeoutMs: o.releaseTimeoutMs,
        renewDelay: () => this.#jittered(o.renewIntervalMs),
        retryDelay: (err, failures) => this.#retryDelay(err, failures),
        attemptTimeoutMs: () => this.#attemptTimeout(),
        end,
        renewed: (rl, sentAt, deadline) => {
          if (rl?.yieldRequested && why !== "graceful" && !leading.signal.aborted) askYield(rl.yieldTo);
          try {
            o.onRenewed?.({ fencingToken: token, sentAt, deadline });
          } catch (cbErr) {
            o.logger.warn("leasesvc elector: onRenewed failed", { lease: this.#name, holder: o.holder, err: String(cbErr) });
          }
        },
      };
      const t = new Term(host, token, sent);
      this.#leading = true;
      this.#token = token;
      this.#term = t;
      this.#lastTerm = t;
      o.logger.info("leasesvc elector: leading", { lease: this.#name, holder: o.holder, fencingToken: token });

      const askYield = (to: string): void => {
        if (yieldAsked) return;
        yieldAsked = true;
        o.logger.info("leasesvc elector: asked to step down", { lease: this.#name, holder: o.holder, fencingToken: token, yieldTo: to });
        Promise.resolve()
          .then(() => o.onYieldRequested?.(leading.signal, to))
          .catch((err: unknown) => o.logger.warn("leasesvc elector: onYieldRequested failed", { lease: this.#name, holder: o.holder, err: String(err) }))
          .finally(() => {
            if (why === "yielded" || leading.signal.aborted) return;
            why = "yielded";
            o.logger.info("leasesvc elector: stepping down", { lease: this.#name, holder: o.holder, fencingToken: token, yieldTo: to });
            end(new YieldedError(to));
          });
      };
      const onParentAbort = (): void => {
        why = "graceful";
        o.logger.info("leasesvc elector: stopping", { lease: this.#name, holder: o.holder });
        end(parent?.reason);
      };
      const onCallbackDone = async (): Promise<void> => {
        // Returning while still leading resigns.
        if (why === "leading" && !leading.signal.aborted) why = "resigned";
        end(new Error("leasesvc elector: onStartedLeading returned"));
        parent?.removeEventListener("abort", onParentAbort);
        await t.finish(why !== "leading");
        t.closed ??= leading.signal.reason ?? new Error("term over");
        if (this.#term === t) this.#term = undefined;
        o.logger.info("leasesvc elector: stopped leading", { lease: this.#name, holder: o.holder, fencingToken: token });
        try {
          o.onStoppedLeading?.();
        } catch (err) {
          o.logger.warn("leasesvc elector: onStoppedLeading failed", { lease: this.#name, holder: o.holder, err: String(err) });
        }
        resolveTerm(why === "graceful" || why === "resigned");
      };

      t.start();
      if (parent?.aborted) onParentAbort();
      else parent?.addEventListener("abort", onParentAbort, { once: true });
      Promise.resolve()
        .then(() => o.onStartedLeading(leading.signal, token, { lease: l, checkpoint: l.checkpoint, checkpointToken: l.checkpoint === null ? 0 : l.checkpointToken }))
        .catch((err: unknown) => o.logger.warn("leasesvc elector: onStartedLeading failed", { lease: this.#name, holder: o.holder, err: String(err) }))
        .finally(() => void onCallbackDone());
    });
  }
}

/** safeSpan is how long after sending a successful acquire or renew the holder may act: ttl × (1 − margin). */
function safeSpan(o: { ttlMs: number; driftMargin: number }): number {
  return o.ttlMs * (1 - o.driftMargin);
}

/** windowText writes a window as the log line says it: "1s", "1.5s", "200ms". */
function windowText(ms: number): string {
  return ms >= 1000 ? `${ms / 1000}s` : `${ms}ms`;
}

function timerSlack(ttlMs: number): number {
  return Math.min(maxTimerSlackMs, ttlMs * timerSlackFraction);
}

/** resolve fills the defaults into a copy of the options and checks them, naming the field at fault. */
function resolve(opts: ElectorOptions): Resolved {
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
  const safe = safeSpan({ ttlMs, driftMargin });
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
  };
}
