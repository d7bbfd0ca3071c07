import { performance } from "node:perf_hooks";
import { type Backoff, backoffDelay, backoffWithDefaults, sleep } from "./backoff.js";
import { InternalError, LeaseError, LeaseLostError, RateLimitedError, UnavailableError } from "./errors.js";
import { type Lease, parseLease } from "./lease.js";
import {
  type HoldingWatcher,
  problemError,
  type SessionAcquireRequest,
  type SessionCallOptions,
  type SessionDeps,
  SessionEndedError,
  SessionLimitError,
  type SessionOptions,
  type SessionRenewRequest,
  type SessionTransferRequest,
} from "./sessiontypes.js";
import { dial, SessionsUnsupportedError, type Wire } from "./socket.js";

export type { HoldingWatcher, SessionAcquireRequest, SessionCallOptions, SessionDeps, SessionOptions, SessionRenewRequest, SessionTransferRequest };
export { problemError, SessionEndedError, SessionLimitError, SessionsUnsupportedError };

/** A request in flight. */
interface Pending {
  wire: Wire;
  /** The answer msg, as it arrived on from. */
  resolve(msg: Record<string, unknown>, from: Wire): void;
  reject(err: unknown): void;
}

/**
 * A socket's place in the session's resumes (docs/contract.md §14, Resume):
 * resumes is the number of resumes begun when it became the session's
 * socket; supersededAt is performance.now() when the first resume after
 * that was sent (Infinity before): from then on the socket is retired and
 * vouches for nothing (A2).
 */
interface Stamp {
  resumes: number;
  supersededAt: number;
}

/** What one request needs beyond its message. */
interface CallHooks {
  /** Added to the call's timeout (an acquire's waitMs). */
  extraMs?: number;
  /** Gets an answer that came after the call was abandoned. */
  onLate?: (msg: Record<string, unknown>) => void;
  /** Gets the answer as it arrives, with the socket it came on, before the call resolves. */
  onAnswer?: (msg: Record<string, unknown>, from: Wire) => void;
  /** Told the socket the request goes on, as it is sent. */
  onSend?: (wire: Wire) => void;
}

/** A request's socket closed before its answer: the request may or may not have taken effect. */
class DroppedError extends UnavailableError {}

type Msg = Record<string, unknown>;

const minWindowMs = 200;
const maxWindowMs = 60_000;

/**
 * A socket on which nothing at all arrived for silentWindows windows (and
 * at least silentMinMs) while heartbeats went out is replaced: it is closed
 * without close and the session resumes on a new one (docs/contract.md
 * §14, A3: a paused instance or a half-open connection would otherwise
 * take the heartbeats until TCP gives up).
 */
export const silentWindows = 4;
export const silentMinMs = 5000;

/**
 * Session is one session (docs/contract.md §14): a WebSocket to the
 * service that heartbeats every window/4 and through which leases are
 * acquired, written, released and transferred. The service holds the
 * session's leases in its backend at a long TTL and releases them all
 * within the window once the heartbeats stop, so a crashed agent's leases
 * free in about a second instead of a TTL.
 *
 * The session's deadline is (performance.now() when the last heartbeat
 * that was acknowledged was sent) + windowMs × (1 − driftMargin), counting
 * only acks that arrive on a socket no resume went out after: the
 * service acknowledges a heartbeat only while every lease of the session
 * is safe for a window beyond it, so a holder that stops leading at the
 * deadline stops before anyone else may start. The Elector ends every term
 * of the session there, whatever the socket says.
 *
 * A dropped socket is not a dead session: it reconnects (backoff
 * reconnectBackoff) and resumes with the leases it holds; a lease another
 * holder took meanwhile is reported lost. When the service asks the
 * session to move (its instance shuts down, or the socket is old), it
 * opens a new socket and resumes there before closing the old one. Once
 * a resume is sent no heartbeat goes on an older socket (its instance may
 * have lost the session and still ack), nor any request; the old
 * socket's acks count for nothing, whatever heartbeat they answer, and its
 * pushes are ignored (the resume says what is still held); a
 * resume that fails after it was sent closes the old socket too; an
 * acquire answered on a socket that a resume began after is acquired again
 * through the resumed socket before it is returned (that resume did not
 * claim it). Each resume proposes an epoch above every epoch the session
 * saw or proposed (a 409 session_conflict resumes again higher). A socket
 * gone silent (silentWindows) is replaced. A release or transfer whose
 * socket dropped before the answer, or that was answered 503 (the session
 * ended on that socket), goes again through the resumed socket, which
 * claimed the holding. close() ends it and releases its leases at once.
 */
export class Session {
  /** The heartbeat window in ms, as the service granted it. */
  windowMs = 0;
  /** How often a heartbeat is sent, ms (the service's heartbeatMs: windowMs / 4). */
  heartbeatMs = 0;
  /** The TTL the service writes the session's leases with, ms. */
  leaseTtlMs = 0;
  /** The session's ownership epoch, as the latest open or resume answered it: 1 when opened, higher with each resume. */
  epoch = 0;
  /** The fraction of the window given up to clock-rate differences. */
  readonly driftMargin: number;
  readonly #deps: SessionDeps;
  readonly #backoff: Backoff;
  readonly #log: NonNullable<SessionOptions["logger"]>;
  #sessionId = "";
  #wire: Wire | undefined;
  /** Sockets being left behind after a move: closed once their requests are answered. */
  readonly #retiring = new Set<Wire>();
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();
  /** Heartbeats sent and not yet acknowledged: id → performance.now() at send and the socket. */
  readonly #beats = new Map<number, { at: number; wire: Wire }>();
  /**
   * The resumes begun: counted when a resume's leases are listed, before
   * it is sent. An acquire answered on a socket that a resume began after
   * was not among the holdings that resume claimed.
   */
  #resumes = 0;
  /** The highest epoch seen (opened, resumed, a conflict) or proposed: the next resume proposes one more (docs/contract.md §14, A1). */
  #highest = 0;
  /** performance.now() when a heartbeat first went out on the socket since anything last arrived on it; 0: none since. */
  #silentSince = 0;
  readonly #stamps = new WeakMap<Wire, Stamp>();
  #lastAck = 0;
  #beatTimer: ReturnType<typeof setInterval> | undefined;
  /** The leases the session holds: name → holder and token, sent with a resume. */
  readonly #held = new Map<string, { holder: string; token: number }>();
  readonly #watchers = new Map<string, Set<HoldingWatcher>>();
  /** Yield requests not yet heard by a watcher of their holding: name → token and candidate. */
  readonly #yields = new Map<string, { token: number; to: string }>();
  /** Set while a reconnection or move runs. */
  #connecting: Promise<void> | undefined;
  /** Resolved when a socket is installed; waiters for a connection share it. */
  #connected: { p: Promise<void>; resolve(): void } = deferred();
  #ended: LeaseError | undefined;
  #closing = false;
  readonly #stop = new AbortController();

  private constructor(deps: SessionDeps, opts: SessionOptions) {
    this.#deps = deps;
    const windowMs = opts.windowMs ?? 1000;
    if (!Number.isInteger(windowMs) || windowMs < minWindowMs || windowMs > maxWindowMs) {
      throw new RangeError(`leasesvc session: windowMs ${windowMs} must be whole milliseconds within ${minWindowMs} … ${maxWindowMs}`);
    }
    this.windowMs = windowMs;
    const dm = opts.driftMargin ?? 0.1;
    if (!(dm >= 0.01 && dm <= 0.5)) throw new RangeError(`leasesvc session: driftMargin ${dm} must be within 0.01 … 0.5`);
    this.driftMargin = dm;
    this.#backoff = backoffWithDefaults(opts.reconnectBackoff, "SessionOptions.reconnectBackoff", { initialMs: 50, maxMs: 1000, multiplier: 2 });
    this.#log = opts.logger ?? { info() {}, warn() {} };
  }

  /**
   * open connects and opens a session (Client.openSession calls it). It
   * throws SessionsUnsupportedError when the service has no sessions, and
   * the refusal as a LeaseError otherwise (a bad window, credentials,
   * limits); it resolves once the first heartbeat is acknowledged, so that
   * deadline() is set.
   */
  static async open(deps: SessionDeps, opts: SessionOptions = {}): Promise<Session> {
    const s = new Session(deps, opts);
    const wire = await s.#dial();
    let opened: Msg;
    try {
      opened = await s.#handshake(wire, { type: "open", windowMs: s.windowMs });
    } catch (err) {
      wire.close(1000);
      if (err instanceof RateLimitedError) {
        throw new SessionLimitError(err.message, { status: err.status, code: err.code, detail: err.detail, retryAfterMs: err.retryAfterMs, cause: err });
      }
      throw err;
    }
    s.#sessionId = String(opened["sessionId"] ?? "");
    s.#install(wire, opened, s.#resumes);
    try {
      await s.#firstAck();
    } catch (err) {
      await s.close().catch(() => undefined);
      throw err;
    }
    return s;
  }

  /** performance.now() when the last acknowledged heartbeat was sent; 0 before any. */
  get lastAckSentAt(): number {
    return this.#lastAck;
  }

  /**
   * The session's safe deadline on performance.now(): lastAckSentAt +
   * windowMs × (1 − driftMargin); 0 before the first acknowledgement. Stop
   * acting on the session's leases at it unless a later heartbeat is
   * acknowledged first.
   */
  deadline(): number {
    return this.#lastAck === 0 ? 0 : this.#lastAck + this.windowMs * (1 - this.driftMargin);
  }

  /** Whether the session has ended (closed, or unknown to the service on resume). */
  get ended(): boolean {
    return this.#ended !== undefined;
  }

  /** Whether a socket is up now (false while reconnecting or after the end). */
  get connected(): boolean {
    return this.#wire !== undefined && this.#ended === undefined;
  }

  /** The names of the leases the session holds, as far as it knows. */
  leases(): string[] {
    return [...this.#held.keys()];
  }

  /** The fencing token of the holding of name by holder that the session holds; 0 when it holds none. */
  heldToken(name: string, holder: string): number {
    const h = this.#held.get(name);
    return h !== undefined && h.holder === holder ? h.token : 0;
  }

  /**
   * Takes the lease through the session (or answers the holder's own
   * holding again). Held by another: LeaseHeldError, as Client.acquire.
   * The holding lives while the session does; aborting the call releases a
   * holding that the service grants afterwards.
   */
  async acquire(name: string, req: SessionAcquireRequest, opts: SessionCallOptions = {}): Promise<Lease> {
    const m: Msg = { type: "acquire", name, holder: req.holder };
    if (req.metadata !== undefined) m["metadata"] = req.metadata;
    const waitMs = Math.max(0, req.waitMs ?? 0);
    if (waitMs > 0) m["waitMs"] = waitMs;
    if (req.priority !== undefined || req.preempt === true) m["priority"] = req.priority ?? 0;
    if (req.preempt === true) m["preempt"] = true;
    const timeoutMs = opts.timeoutMs ?? this.#deps.requestTimeoutMs;
    const until = performance.now() + timeoutMs + waitMs;
    const onLate = (late: Msg): void => {
      // Abandoned: a holding granted after all is not wanted.
      const got = parseLease(late["lease"]);
      if (got.held && got.holder === req.holder) void this.release(name, req.holder, got.fencingToken).catch(() => undefined);
    };
    /** The token of a holding answered on a socket a resume began after (0: none). */
    let unvouched = 0;
    for (;;) {
      let vouched = false;
      // Taken into the table as the answer arrives, so that a resume
      // listing the holdings from now on claims it.
      const onAnswer = (ans: Msg, from: Wire): void => {
        if (ans["type"] !== "result") return;
        const got = parseLease(ans["lease"]);
        if (!got.held || got.holder !== req.holder) return;
        this.#held.set(name, { holder: req.holder, token: got.fencingToken });
        vouched = this.#current(from);
      };
      let l: Lease;
      try {
        const left = until - performance.now();
        if (unvouched !== 0 && left <= 0) throw new UnavailableError(`leasesvc session acquire "${name}": unavailable: no answer through the resumed socket within ${timeoutMs + waitMs} ms`);
        l = await this.#call("acquire", name, m, { signal: opts.signal, timeoutMs: left }, { onLate, onAnswer });
      } catch (err) {
        if (unvouched !== 0) {
          // Given up: the holding is not led; let it go.
          this.#forget(name, unvouched);
          void this.release(name, req.holder, unvouched).catch(() => undefined);
        }
        throw err;
      }
      if (!l.held || l.holder !== req.holder) {
        if (unvouched !== 0) this.#forget(name, unvouched);
        return l;
      }
      if (vouched) {
        this.#noteYield(l);
        return l;
      }
      // A resume began after the socket this answer came on became the
      // session's: that resume did not claim the holding, so the acks of
      // its socket do not vouch for it. Acquire it again through the
      // socket of the latest resume: the same holder through the same
      // session at a later epoch gets the same holding, moved to that
      // epoch (docs/contract.md §14, Resume); until then it is not led.
      unvouched = l.fencingToken;
      for (const k of ["waitMs", "priority", "preempt"]) delete m[k];
      this.#log.info("leasesvc session: an acquire was answered on a socket a resume replaced; acquiring it again through the resumed one", { name, fencingToken: l.fencingToken });
    }
  }

  /** Writes metadata or a checkpoint of a session-held holding. Anything but the live holding: LeaseLostError. */
  async renew(name: string, req: SessionRenewRequest, opts: SessionCallOptions = {}): Promise<Lease> {
    const m: Msg = { type: "renew", name, holder: req.holder, fencingToken: req.fencingToken };
    if (req.metadata !== undefined) m["metadata"] = req.metadata;
    if (req.checkpoint !== undefined) m["checkpoint"] = req.checkpoint;
    const l = await this.#call("renew", name, m, opts);
    this.#noteYield(l);
    return l;
  }

  /**
   * Ends a session-held holding now, writing opts.checkpoint if given. A
   * release whose socket drops before the answer, or that the service
   * answers 503 (the session ended on that socket meanwhile), goes again
   * through the resumed socket; LeaseLostError if that resume reports the
   * holding lost.
   */
  release(name: string, holder: string, fencingToken: number, opts: SessionCallOptions & { checkpoint?: Record<string, unknown> } = {}): Promise<Lease> {
    const m: Msg = { type: "release", name, holder, fencingToken };
    if (opts.checkpoint !== undefined) m["checkpoint"] = opts.checkpoint;
    return this.#letGo("release", name, m, opts);
  }

  /** Hands a session-held holding over to req.to (docs/contract.md §8); sent again through a resumed socket as release is. */
  transfer(name: string, req: SessionTransferRequest, opts: SessionCallOptions = {}): Promise<Lease> {
    const m: Msg = { type: "transfer", name, holder: req.holder, fencingToken: req.fencingToken, to: req.to };
    if (req.toPrincipal !== undefined) m["toPrincipal"] = req.toPrincipal;
    if (req.checkpoint !== undefined) m["checkpoint"] = req.checkpoint;
    if (req.reserveMs !== undefined) m["reserveMs"] = req.reserveMs;
    return this.#letGo("transfer", name, m, opts);
  }

  /**
   * Sends a release or transfer m of a holding until an answer settles it
   * (docs/contract.md §14, argument step 6). Its socket dropped before the
   * answer, or answered 503 unavailable: the holding stays in the table, so
   * the next resume claims it, and m goes again through the socket of a
   * resume begun after it was sent (or, a 503 on a socket that stays, the
   * same one after Retry-After: a backend's 503 ends nothing); a resume
   * that reports it lost ends the call with LeaseLostError. Answered on a
   * socket a resume began after (whose resume listed the holding, and may
   * have claimed it again), it goes again through the current socket too.
   */
  async #letGo(op: "release" | "transfer", name: string, m: Msg, opts: SessionCallOptions): Promise<Lease> {
    const token = num(m["fencingToken"]);
    const until = performance.now() + (opts.timeoutMs ?? this.#deps.requestTimeoutMs);
    let done: Lease | undefined;
    for (;;) {
      let on: Wire | undefined;
      let from: Wire | undefined;
      let retryAt = Infinity;
      try {
        const l = await this.#call(op, name, m, { signal: opts.signal, timeoutMs: until - performance.now() }, { onSend: (w) => (on = w), onAnswer: (_, f) => (from = f) });
        if (from === undefined || this.#current(from) || this.#held.get(name)?.token !== token) {
          this.#forget(name, token);
          return l;
        }
        done = l;
        this.#log.info(`leasesvc session: a ${op} was answered on a socket a resume replaced; sending it again through the resumed one`, { name, fencingToken: token });
      } catch (err) {
        if (err instanceof LeaseLostError && done !== undefined) return done;
        const again = err instanceof DroppedError || (err instanceof UnavailableError && err.status === 503 && err.code === "unavailable");
        if (!again || on === undefined || this.#held.get(name)?.token !== token) throw err;
        if (!(err instanceof DroppedError)) retryAt = performance.now() + 1000; // Retry-After: 1
        this.#log.info(`leasesvc session: a ${op} is sent again through the resumed socket`, { name, fencingToken: token, err: String(err) });
      }
      // Wait for a socket whose resume began after the attempt was sent.
      const after = on === undefined ? -1 : (this.#stamps.get(on)?.resumes ?? -1);
      for (;;) {
        if (this.#ended !== undefined) throw this.#ended;
        if (this.#held.get(name)?.token !== token) {
          if (done !== undefined) return done;
          throw new LeaseLostError(`leasesvc session ${op} "${name}": the holding was lost while the session resumed`, { status: 409 });
        }
        const w = this.#wire;
        if (w !== undefined && this.#current(w) && ((this.#stamps.get(w)?.resumes ?? -1) > after || performance.now() >= retryAt)) break;
        const left = until - performance.now();
        if (left <= 0) throw new UnavailableError(`leasesvc session ${op} "${name}": unavailable: not answered through a resumed socket within the timeout`);
        await Promise.race([this.#connected.p, sleep(Math.min(left, retryAt - performance.now()), opts.signal)]);
        opts.signal?.throwIfAborted();
      }
    }
  }

  /**
   * Registers w for the holding of name with w.token: lost and revoked
   * pushes, yield requests and acknowledged heartbeats reach it until the
   * returned function is called. The Elector's term uses it.
   */
  watchHolding(name: string, w: HoldingWatcher): () => void {
    let set = this.#watchers.get(name);
    if (set === undefined) this.#watchers.set(name, (set = new Set()));
    set.add(w);
    if (this.#ended !== undefined) queueMicrotask(() => w.lost(this.#ended!));
    // A yield request that came while no term listened (between terms, say) is not lost.
    const y = this.#yields.get(name);
    if (y !== undefined && y.token === w.token) queueMicrotask(() => w.yieldTo(y.to));
    return () => {
      set.delete(w);
      if (set.size === 0 && this.#watchers.get(name) === set) this.#watchers.delete(name);
    };
  }

  /**
   * Ends the session: every holding led through it is told (lost) first,
   * then the service is asked to close it, which releases its leases at
   * once. Resolves when the service answered (or after the request
   * timeout); repeated calls are no-ops.
   */
  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    this.#end(new SessionEndedError("leasesvc session: closed"));
    const wire = this.#wire;
    if (wire !== undefined) {
      const id = this.#nextId++;
      const answered = new Promise<void>((resolve) => {
        this.#pending.set(id, { wire, resolve: () => resolve(), reject: () => resolve() });
      });
      wire.send(JSON.stringify({ type: "close", id }));
      const timer = setTimeout(() => this.#pending.get(id)?.reject(undefined), this.#deps.requestTimeoutMs);
      await answered;
      clearTimeout(timer);
      this.#pending.delete(id);
    }
    this.#wire = undefined;
    wire?.close(1000);
    for (const w of this.#retiring) w.close(1000);
    this.#retiring.clear();
  }

  // --- connection ---

  async #dial(): Promise<Wire> {
    const signal = AbortSignal.timeout(this.#deps.requestTimeoutMs);
    const headers = await this.#deps.headers(signal);
    return dial({ baseUrl: this.#deps.baseUrl, headers, timeoutMs: this.#deps.requestTimeoutMs, fetch: this.#deps.fetch });
  }

  /** Sends open or resume on a fresh socket and waits for its answer (opened or resumed); an error answer throws it. */
  #handshake(wire: Wire, m: Msg): Promise<Msg> {
    const id = this.#nextId++;
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new UnavailableError(`leasesvc session: ${String(m["type"])}: no answer within ${this.#deps.requestTimeoutMs} ms`));
        wire.close(1000);
      }, this.#deps.requestTimeoutMs);
      wire.onMessage = (text) => {
        let msg: Msg;
        try {
          msg = JSON.parse(text) as Msg;
        } catch {
          return;
        }
        if (msg["re"] !== id && msg["type"] !== "error") return;
        clearTimeout(timer);
        if (msg["type"] !== "error") return resolve(msg);
        const err = problemError(String(m["type"]), "", msg["problem"]);
        // A conflict names the session's epoch: the next resume proposes above it (A1).
        if (err.code === "session_conflict") this.#highest = Math.max(this.#highest, num((msg["problem"] as Msg | undefined)?.["epoch"]));
        reject(err);
      };
      wire.onClose = (code) => {
        clearTimeout(timer);
        reject(new UnavailableError(`leasesvc session: ${String(m["type"])}: the socket closed (${code})`));
      };
      wire.send(JSON.stringify({ ...m, id }));
    });
  }

  /** Makes wire the session's socket after its open or resume was answered with msg; resumes is the count of resumes begun when it was opened or its resume sent. */
  #install(wire: Wire, msg: Msg, resumes: number): void {
    const old = this.#wire;
    this.#stamps.set(wire, { resumes, supersededAt: Infinity });
    this.epoch = num(msg["epoch"]);
    this.#highest = Math.max(this.#highest, this.epoch);
    this.#silentSince = 0;
    this.windowMs = num(msg["windowMs"]) || this.windowMs;
    this.heartbeatMs = num(msg["heartbeatMs"]) || Math.floor(this.windowMs / 4);
    this.leaseTtlMs = num(msg["leaseTtlMs"]);
    this.#beats.clear(); // heartbeats of a former socket are never acknowledged now
    wire.onMessage = (text) => this.#onMessage(wire, text);
    wire.onClose = (code, reason) => this.#onClose(wire, code, reason);
    this.#wire = wire;
    if (old !== undefined && old !== wire) this.#retire(old);
    clearInterval(this.#beatTimer);
    this.#beatTimer = setInterval(() => this.#beat(), this.heartbeatMs);
    this.#beat();
    this.#connected.resolve();
    this.#connected = deferred();
  }

  /** Resolves once the first heartbeat is acknowledged (or throws when it is not within the request timeout). */
  async #firstAck(): Promise<void> {
    const until = performance.now() + this.#deps.requestTimeoutMs;
    while (this.#lastAck === 0) {
      if (this.#ended !== undefined) throw this.#ended;
      if (performance.now() >= until) throw new UnavailableError(`leasesvc session: open: no heartbeat acknowledged within ${this.#deps.requestTimeoutMs} ms`);
      await sleep(Math.min(10, this.heartbeatMs));
    }
  }

  /** Closes old once the requests it carries are answered (or a window passed): a move's make-before-break. */
  #retire(old: Wire): void {
    this.#retiring.add(old);
    old.onClose = () => {
      this.#retiring.delete(old);
      this.#failPending(old);
    };
    const until = performance.now() + this.windowMs;
    const check = (): void => {
      const busy = [...this.#pending.values()].some((p) => p.wire === old);
      if (!busy || performance.now() >= until || this.#ended !== undefined) {
        this.#retiring.delete(old);
        old.close(1000);
        this.#failPending(old);
        return;
      }
      setTimeout(check, 10);
    };
    check();
  }

  /** Whether no resume began since wire became the session's socket: its instance claimed everything the session holds. */
  #current(wire: Wire): boolean {
    return this.#stamps.get(wire)?.resumes === this.#resumes;
  }

  /** Whether wire is retired (A2): a resume went out after it became the session's socket, or it never became it. Its acks count for nothing. */
  #retired(wire: Wire): boolean {
    const stamp = this.#stamps.get(wire);
    return stamp === undefined || stamp.supersededAt !== Infinity || stamp.resumes !== this.#resumes;
  }

  #beat(): void {
    const wire = this.#wire;
    // Once a resume went out on a new socket, the old one's instance may
    // have lost the session without knowing yet: it would still ack.
    if (wire === undefined || this.#ended !== undefined || !this.#current(wire)) return;
    const now = performance.now();
    if (this.#silentSince === 0) this.#silentSince = now;
    else if (now - this.#silentSince >= Math.max(silentWindows * this.windowMs, silentMinMs)) {
      // Gone silent (A3), unless answers only waited unread behind a
      // stalled event loop: decide once they are read (the check phase
      // follows the poll phase).
      const since = this.#silentSince;
      setImmediate(() => {
        if (this.#wire === wire && this.#silentSince === since) this.#replace(wire, "nothing arrived on the socket while heartbeats went out");
      });
      return;
    }
    const id = this.#nextId++;
    this.#beats.set(id, { at: now, wire });
    // Heartbeats never acknowledged (the service cannot vouch for the leases) are forgotten after two windows.
    for (const [k, { at }] of this.#beats) {
      if (at >= now - 2 * this.windowMs) break;
      this.#beats.delete(k);
    }
    wire.send(JSON.stringify({ type: "heartbeat", id }));
  }

  #onMessage(wire: Wire, text: string): void {
    let msg: Msg;
    try {
      msg = JSON.parse(text) as Msg;
    } catch {
      this.#log.warn("leasesvc session: unreadable message", { text: text.slice(0, 200) });
      return;
    }
    if (wire === this.#wire) this.#silentSince = 0;
    const type = msg["type"];
    const re = typeof msg["re"] === "number" ? msg["re"] : undefined;
    if (type === "ack" && re !== undefined) {
      const beat = this.#beats.get(re);
      if (beat === undefined || beat.wire !== wire) return;
      // A socket a resume went out after is retired (A2) and vouches for
      // nothing, not even for heartbeats sent before that resume: its
      // instance may have lost the session's leases to other holders and
      // pushed lost for them, pushes the session ignores on a retired socket.
      if (this.#retired(wire)) return;
      const sentAt = beat.at;
      for (const k of this.#beats.keys()) {
        if (k > re) break;
        this.#beats.delete(k);
      }
      if (sentAt <= this.#lastAck) return;
      this.#lastAck = sentAt;
      const deadline = this.deadline();
      for (const set of this.#watchers.values()) for (const w of set) w.acked(sentAt, deadline);
      return;
    }
    if (re !== undefined) {
      const p = this.#pending.get(re);
      if (p === undefined) return;
      this.#pending.delete(re);
      p.resolve(msg, wire);
      return;
    }
    if (type === "error") {
      this.#log.warn("leasesvc session: the service refused the socket", { problem: msg["problem"] });
      return; // it closes the socket next: onClose reconnects
    }
    // A socket a resume went out after is retired (A2): its pushes are stale, the resume says what is held.
    if (wire !== this.#wire || !this.#current(wire)) return;
    const name = String(msg["name"] ?? "");
    const token = num(msg["fencingToken"]);
    switch (type) {
      case "lost": {
        const reason = String(msg["reason"] ?? "");
        this.#lost(name, token, new LeaseLostError(`leasesvc session: lease "${name}" lost (${reason})`, { status: 409, detail: reason }));
        return;
      }
      case "revoked": {
        const reason = String(msg["reason"] ?? "");
        const op = String(msg["operator"] ?? "");
        this.#lost(name, token, new LeaseLostError(`leasesvc session: lease "${name}" revoked by ${op || "an operator"}: ${reason}`, { status: 409, detail: reason }));
        return;
      }
      case "yield":
        this.#yield(name, token, String(msg["to"] ?? ""));
        return;
      case "move":
        this.#log.info("leasesvc session: the service asks the session to move", { reason: msg["reason"] });
        void this.#reconnect("move");
        return;
    }
  }

  /** Tells the watchers of the holding (name, token) that to asks it to step down, and keeps the request for later ones. */
  #yield(name: string, token: number, to: string): void {
    if (this.#held.get(name)?.token !== token) return;
    this.#yields.set(name, { token, to });
    for (const w of [...(this.#watchers.get(name) ?? [])]) if (w.token === token) w.yieldTo(to);
  }

  /** A lease the service answered (a result, a resume) may carry a yield request: the push may have been missed. */
  #noteYield(l: Lease): void {
    if (l.held && l.yieldRequested && l.yieldTo !== "") this.#yield(l.name, l.fencingToken, l.yieldTo);
  }

  #lost(name: string, token: number, err: LeaseError): void {
    this.#forget(name, token);
    for (const w of [...(this.#watchers.get(name) ?? [])]) if (w.token === token) w.lost(err);
  }

  #forget(name: string, token: number): void {
    if (this.#held.get(name)?.token === token) this.#held.delete(name);
    if (this.#yields.get(name)?.token === token) this.#yields.delete(name);
  }

  #onClose(wire: Wire, code: number, reason: string): void {
    this.#failPending(wire);
    if (wire !== this.#wire) return;
    this.#wire = undefined;
    if (this.#ended !== undefined) return;
    this.#log.warn("leasesvc session: the socket dropped; resuming", { code, reason });
    void this.#reconnect("drop");
  }

  /** Gives wire up at once, without close (the session lives on): closed, its requests failed, no more heartbeats or requests on it. */
  #abandonWire(wire: Wire, why = "the resume's outcome is unknown"): void {
    this.#log.warn(`leasesvc session: ${why}; closing the old socket`);
    if (this.#wire === wire) this.#wire = undefined;
    wire.close(1000);
    this.#failPending(wire);
  }

  /** Gives the current socket up and resumes on a new one. */
  #replace(wire: Wire, why: string): void {
    if (wire !== this.#wire || this.#ended !== undefined) return;
    this.#abandonWire(wire, why);
    void this.#reconnect("drop");
  }

  #failPending(wire: Wire): void {
    for (const [id, p] of this.#pending) {
      if (p.wire !== wire) continue;
      this.#pending.delete(id);
      p.reject(new DroppedError("leasesvc session: the socket closed before the answer"));
    }
  }

  /** Opens a new socket and resumes on it, retrying until it works or the session ends; on a move the old socket lives on meanwhile. */
  #reconnect(why: "drop" | "move"): Promise<void> {
    this.#connecting ??= (async () => {
      for (let n = 0; this.#ended === undefined; n++) {
        try {
          const wire = await this.#dial();
          if (this.#ended !== undefined) {
            wire.close(1000);
            return;
          }
          // The holdings this resume claims are listed, the resume counted
          // and its epoch recorded as proposed at once (A1: a resume begun
          // after, even with this one unanswered, proposes more), and it is
          // sent right after (#handshake sends synchronously): a holding
          // answered from now on a socket that became the session's before
          // is not among them.
          const resumes = ++this.#resumes;
          const epoch = ++this.#highest;
          const leases = [...this.#held].map(([name, h]) => ({ name, holder: h.holder, fencingToken: h.token }));
          const old = this.#wire;
          const stamp = old === undefined ? undefined : this.#stamps.get(old);
          if (stamp !== undefined && stamp.supersededAt === Infinity) stamp.supersededAt = performance.now();
          let resumed: Msg;
          try {
            resumed = await this.#handshake(wire, { type: "resume", sessionId: this.#sessionId, epoch, windowMs: this.windowMs, leases });
          } catch (err) {
            wire.close(1000);
            // Sent, the resume may have taken the session from the old
            // socket's instance, which acks on until it finds out: the old
            // socket is given up (a refusal that ends the session closes it
            // as well).
            if (old !== undefined && old === this.#wire) this.#abandonWire(old);
            throw err;
          }
          if (this.#ended !== undefined || resumes !== this.#resumes) {
            // Answered on a socket no longer current (A2): ignored, dropped.
            wire.close(1000);
            return;
          }
          this.#install(wire, resumed, resumes);
          this.#log.info(why === "move" ? "leasesvc session: moved" : "leasesvc session: resumed", { epoch: this.epoch });
          for (const l of Array.isArray(resumed["leases"]) ? (resumed["leases"] as unknown[]) : []) this.#noteYield(parseLease(l));
          for (const l of Array.isArray(resumed["lost"]) ? (resumed["lost"] as Msg[]) : []) {
            const name = String(l["name"] ?? "");
            const reason = String(l["reason"] ?? "");
            this.#lost(name, num(l["fencingToken"]), new LeaseLostError(`leasesvc session: lease "${name}" lost while resuming (${reason})`, { status: 409, detail: reason }));
          }
          return;
        } catch (err) {
          if (err instanceof LeaseError && (err.code === "session_not_found" || err.status === 400 || err.status === 401 || err.status === 403)) {
            this.#log.warn("leasesvc session: the session cannot be resumed: it ended", { err: String(err) });
            this.#end(new SessionEndedError(`leasesvc session: ended: ${err.message}`, { status: err.status, cause: err }));
            return;
          }
          // A 409 session_conflict: the session is at this epoch or above; the next resume proposes above it.
          this.#log.warn("leasesvc session: reconnect failed", { err: String(err), attempt: n + 1, epoch: this.#highest });
          let d = backoffDelay(this.#backoff, n);
          if (err instanceof LeaseError && err.retryAfterMs > d) d = Math.min(err.retryAfterMs, 10 * this.#backoff.maxMs);
          await sleep(d, this.#stop.signal);
        }
      }
    })().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  /** Ends the session with err: every watcher is told, calls waiting for a socket fail. */
  #end(err: LeaseError): void {
    if (this.#ended !== undefined) return;
    this.#ended = err;
    this.#stop.abort();
    clearInterval(this.#beatTimer);
    const watchers = [...this.#watchers.values()].flatMap((s) => [...s]);
    this.#held.clear();
    this.#yields.clear();
    for (const w of watchers) w.lost(err);
    this.#connected.resolve();
    if (!this.#closing) {
      for (const [id, p] of this.#pending) {
        this.#pending.delete(id);
        p.reject(err);
      }
      const wire = this.#wire;
      this.#wire = undefined;
      wire?.close(1000);
    }
  }

  // --- requests ---

  /**
   * Waits for the current socket (none while a resume is in flight: A2),
   * sends m and resolves to the lease its result carries; an error answer
   * throws as the Client would.
   */
  async #call(op: string, name: string, m: Msg, opts: SessionCallOptions, hooks: CallHooks = {}): Promise<Lease> {
    const { onLate, onAnswer } = hooks;
    const timeoutMs = (opts.timeoutMs ?? this.#deps.requestTimeoutMs) + (hooks.extraMs ?? 0);
    const until = performance.now() + timeoutMs;
    const signal = opts.signal;
    signal?.throwIfAborted();
    while (this.#wire === undefined || !this.#current(this.#wire)) {
      if (this.#ended !== undefined) throw this.#ended;
      const left = until - performance.now();
      if (left <= 0) throw new UnavailableError(`leasesvc session ${op} "${name}": unavailable: not connected`);
      const c = this.#connected.p;
      await Promise.race([c, sleep(left, signal)]);
      signal?.throwIfAborted();
    }
    if (this.#ended !== undefined) throw this.#ended;
    const wire = this.#wire;
    const id = this.#nextId++;
    const answer = await new Promise<Msg>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      const timer = setTimeout(() => {
        this.#abandon(id, onLate);
        done();
        reject(new UnavailableError(`leasesvc session ${op} "${name}": unavailable: no answer within ${timeoutMs} ms`));
      }, Math.max(1, until - performance.now()));
      const onAbort = (): void => {
        this.#abandon(id, onLate);
        done();
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#pending.set(id, {
        wire,
        resolve: (msg, from) => {
          done();
          onAnswer?.(msg, from);
          resolve(msg);
        },
        reject: (err) => {
          done();
          reject(err);
        },
      });
      hooks.onSend?.(wire);
      wire.send(JSON.stringify({ ...m, id }));
    });
    if (answer["type"] === "error") {
      const err = problemError(op, name, answer["problem"]);
      if (err instanceof LeaseLostError) this.#forget(name, num(m["fencingToken"]));
      throw err;
    }
    if (answer["type"] !== "result") throw new InternalError(`leasesvc session ${op} "${name}": unexpected answer ${JSON.stringify(answer["type"])}`);
    return parseLease(answer["lease"]);
  }

  /** Stops waiting for request id; a late answer goes to onLate. */
  #abandon(id: number, onLate?: (msg: Msg) => void): void {
    const p = this.#pending.get(id);
    if (p === undefined) return;
    this.#pending.set(id, {
      wire: p.wire,
      resolve: (msg) => {
        if (msg["type"] === "result") onLate?.(msg);
      },
      reject: () => {},
    });
  }
}

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

function deferred(): { p: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const p = new Promise<void>((r) => (resolve = r));
  return { p, resolve };
}

