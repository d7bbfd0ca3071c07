import { performance } from "node:perf_hooks";
import { type Backoff, backoffDelay, backoffWithDefaults, sleep } from "./backoff.js";
import { type Clock, systemClock } from "./clock.js";
import { InternalError, LeaseError, LeaseLostError, UnavailableError } from "./errors.js";
import { type Lease, parseLease } from "./lease.js";
import { checkSendable, protocolText, unsafeOrdering } from "./safeint.js";
import { HeldTable } from "./sessionheld.js";
import { type HoldingWatcher, problemError, type SessionCallOptions, type SessionDeps, SessionEndedError, type SessionOptions } from "./sessiontypes.js";
import { dial, type Wire } from "./socket.js";

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

/** The most messages kept from a socket before its open or resume is answered; more closes it. */
const maxEarly = 1000;

/** What one request needs beyond its message. */
export interface CallHooks {
  /** Added to the call's timeout (an acquire's waitMs). */
  extraMs?: number;
  /** Gets an answer that came after the call was abandoned. */
  onLate?: (msg: Record<string, unknown>) => void;
  /** Gets the answer as it arrives, with the socket it came on, before the call resolves. */
  onAnswer?: (msg: Record<string, unknown>, from: Wire) => void;
  /** Told the socket the request goes on, as it is sent. */
  onSend?: (wire: Wire) => void;
  /** Called once the request is answered or given up on its socket (before onAnswer, or as the call fails). */
  onSettled?: () => void;
}

/** A request's socket closed before its answer: the request may or may not have taken effect. */
export class DroppedError extends UnavailableError {}

export type Msg = Record<string, unknown>;

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
 * SessionCore is the connection engine of a Session (docs/contract.md
 * §14): the socket, heartbeats and their acknowledgements, resumes and
 * moves (rules A1–A3), pushes, and the requests in flight. Session
 * (session.ts) adds the lease operations on top; the split is by file
 * size only: SessionCore is not exported from the package.
 */
export abstract class SessionCore {
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
  /** The clock the deadlines are measured on: heartbeat and acquire send times (SessionOptions.clock). Timeouts and backoffs run on real time. */
  protected readonly _clock: Clock;
  protected readonly _deps: SessionDeps;
  readonly #backoff: Backoff;
  protected readonly _log: NonNullable<SessionOptions["logger"]>;
  protected _sessionId = "";
  protected _wire: Wire | undefined;
  /** Sockets being left behind after a move: closed once their requests are answered. */
  protected readonly _retiring = new Set<Wire>();
  protected _nextId = 1;
  protected readonly _pending = new Map<number, Pending>();
  /** Heartbeats sent and not yet acknowledged: id → the clock's time at send and the socket. */
  readonly #beats = new Map<number, { at: number; wire: Wire }>();
  /**
   * The resumes begun: counted when a resume's leases are listed, before
   * it is sent. An acquire answered on a socket that a resume began after
   * was not among the holdings that resume claimed.
   */
  protected _resumes = 0;
  /** The highest epoch seen (opened, resumed, a conflict) or proposed: the next resume proposes one more (docs/contract.md §14, A1). */
  #highest = 0;
  /** performance.now() when a heartbeat first went out on the socket since anything last arrived on it; 0: none since (real time: a liveness check). */
  #silentSince = 0;
  protected readonly _stamps = new WeakMap<Wire, Stamp>();
  protected _lastAck = 0;
  #beatTimer: ReturnType<typeof setInterval> | undefined;
  /** The leases the session holds: name → holder and token, sent with a resume, and what vouches for each (A4, A5). */
  protected readonly _held = new HeldTable();
  /** Resolved at each ack that counts (and at the end); waiters for one share it. */
  #ackSeen: { p: Promise<void>; resolve(): void } = deferred();
  /** The messages other than the answer that arrived on a socket before its open or resume was answered (pushes): the socket's, applied once the answer is. */
  readonly #early = new WeakMap<Wire, string[]>();
  protected readonly _watchers = new Map<string, Set<HoldingWatcher>>();
  /** Yield requests not yet heard by a watcher of their holding: name → token and candidate. */
  protected readonly _yields = new Map<string, { token: number; to: string }>();
  /** Set while a reconnection or move runs. */
  #connecting: Promise<void> | undefined;
  /** Resolved when a socket is installed; waiters for a connection share it. */
  protected _connected: { p: Promise<void>; resolve(): void } = deferred();
  protected _ended: LeaseError | undefined;
  protected _closing = false;
  readonly #stop = new AbortController();

  protected constructor(deps: SessionDeps, opts: SessionOptions) {
    this._deps = deps;
    const windowMs = opts.windowMs ?? 1000;
    if (!Number.isInteger(windowMs) || windowMs < minWindowMs || windowMs > maxWindowMs) {
      throw new RangeError(`leasesvc session: windowMs ${windowMs} must be whole milliseconds within ${minWindowMs} … ${maxWindowMs}`);
    }
    this.windowMs = windowMs;
    const dm = opts.driftMargin ?? 0.1;
    if (!(dm >= 0.01 && dm <= 0.5)) throw new RangeError(`leasesvc session: driftMargin ${dm} must be within 0.01 … 0.5`);
    this.driftMargin = dm;
    this._clock = opts.clock ?? systemClock;
    this.#backoff = backoffWithDefaults(opts.reconnectBackoff, "SessionOptions.reconnectBackoff", { initialMs: 50, maxMs: 1000, multiplier: 2 });
    this._log = opts.logger ?? { info() {}, warn() {} };
  }

  /** The session's safe deadline (Session.deadline). */
  abstract deadline(): number;

  // --- connection ---

  protected async _dial(): Promise<Wire> {
    const signal = AbortSignal.timeout(this._deps.requestTimeoutMs);
    const headers = await this._deps.headers(signal);
    return dial({ baseUrl: this._deps.baseUrl, headers, timeoutMs: this._deps.requestTimeoutMs, fetch: this._deps.fetch });
  }

  /** Sends open or resume on a fresh socket and waits for its answer (opened or resumed); an error answer throws it. */
  protected _handshake(wire: Wire, m: Msg): Promise<Msg> {
    const id = this._nextId++;
    return new Promise<Msg>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new UnavailableError(`leasesvc session: ${String(m["type"])}: no answer within ${this._deps.requestTimeoutMs} ms`));
        wire.close(1000);
      }, this._deps.requestTimeoutMs);
      const early: string[] = [];
      this.#early.set(wire, early);
      const fail = (err: LeaseError): void => {
        clearTimeout(timer);
        reject(err);
        wire.close(1000);
      };
      wire.onMessage = (text) => {
        let msg: Msg;
        try {
          msg = JSON.parse(text) as Msg;
        } catch {
          return;
        }
        const bad = unsafeOrdering(msg);
        if (bad !== "") return fail(new InternalError(`leasesvc session: ${String(m["type"])}: ${protocolText(bad)}`));
        if (msg["re"] !== id && msg["type"] !== "error") {
          // A push before the answer: the socket is the current one from
          // the moment the resume went out (A2), so it is kept and applied,
          // in order, once the answer is.
          if (early.push(text) > maxEarly) fail(new InternalError(`leasesvc session: ${String(m["type"])}: more than ${maxEarly} messages before the answer`));
          return;
        }
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

  /**
   * Makes wire the session's socket after its open or resume was answered
   * with msg; resumes is the count of resumes begun when it was opened or
   * its resume sent, listed the holdings that resume claimed. A resumed's
   * leases and lost are taken in, then the pushes that came before it.
   */
  protected _install(wire: Wire, msg: Msg, resumes: number, listed: ReadonlyArray<{ name: string; fencingToken: number }> = []): void {
    const old = this._wire;
    this._stamps.set(wire, { resumes, supersededAt: Infinity });
    this.epoch = num(msg["epoch"]);
    this.#highest = Math.max(this.#highest, this.epoch);
    this.#silentSince = 0;
    this.windowMs = num(msg["windowMs"]) || this.windowMs;
    this.heartbeatMs = num(msg["heartbeatMs"]) || Math.floor(this.windowMs / 4);
    this.leaseTtlMs = num(msg["leaseTtlMs"]);
    this.#beats.clear(); // heartbeats of a former socket are never acknowledged now
    wire.onMessage = (text) => this.#onMessage(wire, text);
    wire.onClose = (code, reason) => this.#onClose(wire, code, reason);
    this._wire = wire;
    if (old !== undefined && old !== wire) this.#retire(old);
    if (msg["type"] === "resumed") {
      this._held.resumed(wire, listed);
      for (const l of Array.isArray(msg["leases"]) ? (msg["leases"] as unknown[]) : []) this._noteYield(parseLease(l));
      for (const l of Array.isArray(msg["lost"]) ? (msg["lost"] as Msg[]) : []) {
        const name = String(l["name"] ?? "");
        const reason = String(l["reason"] ?? "");
        this.#lost(name, num(l["fencingToken"]), new LeaseLostError(`leasesvc session: lease "${name}" lost while resuming (${reason})`, { status: 409, detail: reason }));
      }
    }
    const early = this.#early.get(wire) ?? [];
    this.#early.delete(wire);
    for (const text of early) {
      if (this._wire !== wire) break;
      this.#onMessage(wire, text);
    }
    if (this._wire !== wire) return; // a push gave it up: another socket is under way
    clearInterval(this.#beatTimer);
    this.#beatTimer = setInterval(() => this.#beat(), this.heartbeatMs);
    this.#beat();
    this._connected.resolve();
    this._connected = deferred();
  }

  /** Resolves once the first heartbeat is acknowledged (or throws when it is not within the request timeout). */
  protected async _firstAck(): Promise<void> {
    const until = performance.now() + this._deps.requestTimeoutMs;
    while (this._lastAck === 0) {
      if (this._ended !== undefined) throw this._ended;
      if (performance.now() >= until) throw new UnavailableError(`leasesvc session: open: no heartbeat acknowledged within ${this._deps.requestTimeoutMs} ms`);
      await sleep(Math.min(10, this.heartbeatMs));
    }
  }

  /** Resolves at the next ack that counts, or at once when the session has ended. */
  protected _ackSeen(): Promise<void> {
    return this._ended !== undefined ? Promise.resolve() : this.#ackSeen.p;
  }

  /** Closes old once the requests it carries are answered (or a window passed): a move's make-before-break. */
  #retire(old: Wire): void {
    this._retiring.add(old);
    old.onClose = () => {
      this._retiring.delete(old);
      this.#failPending(old);
    };
    const until = performance.now() + this.windowMs;
    const check = (): void => {
      const busy = [...this._pending.values()].some((p) => p.wire === old);
      if (!busy || performance.now() >= until || this._ended !== undefined) {
        this._retiring.delete(old);
        old.close(1000);
        this.#failPending(old);
        return;
      }
      setTimeout(check, 10);
    };
    check();
  }

  /** Whether no resume began since wire became the session's socket: its instance claimed everything the session holds. */
  protected _current(wire: Wire): boolean {
    return this._stamps.get(wire)?.resumes === this._resumes;
  }

  /** Whether wire is retired (A2): a resume went out after it became the session's socket, or it never became it. Its acks count for nothing. */
  #retired(wire: Wire): boolean {
    const stamp = this._stamps.get(wire);
    return stamp === undefined || stamp.supersededAt !== Infinity || stamp.resumes !== this._resumes;
  }

  #beat(): void {
    const wire = this._wire;
    // Once a resume went out on a new socket, the old one's instance may
    // have lost the session without knowing yet: it would still ack.
    if (wire === undefined || this._ended !== undefined || !this._current(wire)) return;
    const real = performance.now();
    if (this.#silentSince === 0) this.#silentSince = real;
    else if (real - this.#silentSince >= Math.max(silentWindows * this.windowMs, silentMinMs)) {
      // Gone silent (A3), unless answers only waited unread behind a
      // stalled event loop: decide once they are read (the check phase
      // follows the poll phase).
      const since = this.#silentSince;
      setImmediate(() => {
        if (this._wire === wire && this.#silentSince === since) this.#replace(wire, "nothing arrived on the socket while heartbeats went out");
      });
      return;
    }
    const id = this._nextId++;
    const now = this._clock.now();
    this.#beats.set(id, { at: now, wire });
    // Heartbeats never acknowledged (the service cannot vouch for the leases) are forgotten after two windows (or beyond 64).
    for (const [k, { at }] of this.#beats) {
      if (at >= now - 2 * this.windowMs && this.#beats.size <= 64) break;
      this.#beats.delete(k);
    }
    wire.send(JSON.stringify({ type: "heartbeat", id }));
  }

  #onMessage(wire: Wire, text: string): void {
    let msg: Msg;
    try {
      msg = JSON.parse(text) as Msg;
    } catch {
      this._log.warn("leasesvc session: unreadable message", { text: text.slice(0, 200) });
      return;
    }
    if (wire === this._wire) this.#silentSince = 0;
    const type = msg["type"];
    const re = typeof msg["re"] === "number" ? msg["re"] : undefined;
    const bad = unsafeOrdering(msg);
    if (bad !== "") {
      this.#protocolError(wire, re, new InternalError(`leasesvc session: ${String(type)}: ${protocolText(bad)}`));
      return;
    }
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
      // A4: the ack counts for the holdings answered on this socket before it.
      const moved = this._held.acked(wire, sentAt);
      this.#ackSeen.resolve();
      this.#ackSeen = deferred();
      const all = sentAt > this._lastAck;
      if (all) this._lastAck = sentAt;
      const deadline = this.deadline();
      for (const [name, set] of this._watchers) if (all || moved.includes(name)) for (const w of set) w.acked(sentAt, deadline);
      return;
    }
    if (re !== undefined) {
      const p = this._pending.get(re);
      if (p === undefined) return;
      this._pending.delete(re);
      p.resolve(msg, wire);
      return;
    }
    if (type === "error") {
      this._log.warn("leasesvc session: the service refused the socket", { problem: msg["problem"] });
      return; // it closes the socket next: onClose reconnects
    }
    // A socket a resume went out after is retired (A2): its pushes are stale, the resume says what is held.
    if (wire !== this._wire || !this._current(wire)) return;
    const name = String(msg["name"] ?? "");
    const token = num(msg["fencingToken"]);
    switch (type) {
      case "lost": {
        const reason = String(msg["reason"] ?? "");
        const err = new LeaseLostError(`leasesvc session: lease "${name}" lost (${reason})`, { status: 409, detail: reason });
        this._held.heard(name, token, wire, err); // A5: its acquire may still be unanswered
        this.#lost(name, token, err);
        return;
      }
      case "revoked": {
        const reason = String(msg["reason"] ?? "");
        const op = String(msg["operator"] ?? "");
        const err = new LeaseLostError(`leasesvc session: lease "${name}" revoked by ${op || "an operator"}: ${reason}`, { status: 409, detail: reason });
        this._held.heard(name, token, wire, err);
        this.#lost(name, token, err);
        return;
      }
      case "yield":
        this.#yield(name, token, String(msg["to"] ?? ""));
        return;
      case "move":
        this._log.info("leasesvc session: the service asks the session to move", { reason: msg["reason"] });
        // Heard while the resume that made this socket current finishes (a push that came before its answer): moved after it.
        if (this.#connecting === undefined) void this.#reconnect("move");
        else void this.#connecting.then(() => (this._wire === wire ? this.#reconnect("move") : undefined));
        return;
    }
  }

  /**
   * A message on wire carried an epoch or fencing token JSON cannot carry
   * exactly (above 2^53 − 1): nothing in it is acted on, the request it
   * answers fails with err, and the socket is given up (the current one is
   * replaced: the resume on a new socket says what is still held).
   */
  #protocolError(wire: Wire, re: number | undefined, err: InternalError): void {
    const p = re === undefined ? undefined : this._pending.get(re);
    if (p !== undefined && p.wire === wire) {
      this._pending.delete(re!);
      p.reject(err);
    }
    if (wire === this._wire) this.#replace(wire, err.message);
    else {
      this._log.warn(`leasesvc session: ${err.message}; closing the socket`);
      wire.close(1000);
      this.#failPending(wire);
    }
  }

  /** Tells the watchers of the holding (name, token) that to asks it to step down, and keeps the request for later ones. */
  #yield(name: string, token: number, to: string): void {
    if (this._held.get(name)?.token !== token) return;
    this._yields.set(name, { token, to });
    for (const w of [...(this._watchers.get(name) ?? [])]) if (w.token === token) w.yieldTo(to);
  }

  /** A lease the service answered (a result, a resume) may carry a yield request: the push may have been missed. */
  protected _noteYield(l: Lease): void {
    if (l.held && l.yieldRequested && l.yieldTo !== "") this.#yield(l.name, l.fencingToken, l.yieldTo);
  }

  #lost(name: string, token: number, err: LeaseError): void {
    this._forget(name, token);
    for (const w of [...(this._watchers.get(name) ?? [])]) if (w.token === token) w.lost(err);
  }

  protected _forget(name: string, token: number): void {
    if (this._held.get(name)?.token === token) this._held.delete(name);
    if (this._yields.get(name)?.token === token) this._yields.delete(name);
  }

  #onClose(wire: Wire, code: number, reason: string): void {
    this.#failPending(wire);
    if (wire !== this._wire) return;
    this._wire = undefined;
    if (this._ended !== undefined) return;
    this._log.warn("leasesvc session: the socket dropped; resuming", { code, reason });
    void this.#reconnect("drop");
  }

  /** Gives wire up at once, without close (the session lives on): closed, its requests failed, no more heartbeats or requests on it. */
  #abandonWire(wire: Wire, why = "the resume's outcome is unknown"): void {
    this._log.warn(`leasesvc session: ${why}; closing the old socket`);
    if (this._wire === wire) this._wire = undefined;
    wire.close(1000);
    this.#failPending(wire);
  }

  /** Gives the current socket up and resumes on a new one. */
  #replace(wire: Wire, why: string): void {
    if (wire !== this._wire || this._ended !== undefined) return;
    this.#abandonWire(wire, why);
    void this.#reconnect("drop");
  }

  #failPending(wire: Wire): void {
    for (const [id, p] of this._pending) {
      if (p.wire !== wire) continue;
      this._pending.delete(id);
      p.reject(new DroppedError("leasesvc session: the socket closed before the answer"));
    }
  }

  /** Opens a new socket and resumes on it, retrying until it works or the session ends; on a move the old socket lives on meanwhile. */
  #reconnect(why: "drop" | "move"): Promise<void> {
    this.#connecting ??= (async () => {
      for (let n = 0; this._ended === undefined; n++) {
        try {
          const wire = await this._dial();
          if (this._ended !== undefined) {
            wire.close(1000);
            return;
          }
          // The holdings this resume claims are listed, the resume counted
          // and its epoch recorded as proposed at once (A1: a resume begun
          // after, even with this one unanswered, proposes more), and it is
          // sent right after (_handshake sends synchronously): a holding
          // answered from now on a socket that became the session's before
          // is not among them.
          const resumes = ++this._resumes;
          const epoch = ++this.#highest;
          if (epoch > Number.MAX_SAFE_INTEGER) {
            // Never proposed: the service accepts no epoch above 2^53 − 1.
            wire.close(1000);
            this._end(new SessionEndedError(`leasesvc session: ended: the next resume would propose epoch ${epoch}, above 2^53 − 1`));
            return;
          }
          const leases = [...this._held].map(([name, h]) => ({ name, holder: h.holder, fencingToken: h.token }));
          const old = this._wire;
          const stamp = old === undefined ? undefined : this._stamps.get(old);
          if (stamp !== undefined && stamp.supersededAt === Infinity) stamp.supersededAt = performance.now();
          let resumed: Msg;
          try {
            resumed = await this._handshake(wire, { type: "resume", sessionId: this._sessionId, epoch, windowMs: this.windowMs, leases });
          } catch (err) {
            wire.close(1000);
            // Sent, the resume may have taken the session from the old
            // socket's instance, which acks on until it finds out: the old
            // socket is given up (a refusal that ends the session closes it
            // as well).
            if (old !== undefined && old === this._wire) this.#abandonWire(old);
            throw err;
          }
          if (this._ended !== undefined || resumes !== this._resumes) {
            // Answered on a socket no longer current (A2): ignored, dropped.
            wire.close(1000);
            return;
          }
          this._log.info(why === "move" ? "leasesvc session: moved" : "leasesvc session: resumed", { epoch: num(resumed["epoch"]) });
          this._install(wire, resumed, resumes, leases);
          return;
        } catch (err) {
          if (err instanceof LeaseError && (err.code === "session_not_found" || err.status === 400 || err.status === 401 || err.status === 403)) {
            this._log.warn("leasesvc session: the session cannot be resumed: it ended", { err: String(err) });
            this._end(new SessionEndedError(`leasesvc session: ended: ${err.message}`, { status: err.status, cause: err }));
            return;
          }
          // A 409 session_conflict: the session is at this epoch or above; the next resume proposes above it.
          this._log.warn("leasesvc session: reconnect failed", { err: String(err), attempt: n + 1, epoch: this.#highest });
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
  protected _end(err: LeaseError): void {
    if (this._ended !== undefined) return;
    this._ended = err;
    this.#stop.abort();
    clearInterval(this.#beatTimer);
    const watchers = [...this._watchers.values()].flatMap((s) => [...s]);
    this._held.clear();
    this._yields.clear();
    for (const w of watchers) w.lost(err);
    this._connected.resolve();
    this.#ackSeen.resolve();
    if (!this._closing) {
      for (const [id, p] of this._pending) {
        this._pending.delete(id);
        p.reject(err);
      }
      const wire = this._wire;
      this._wire = undefined;
      wire?.close(1000);
    }
  }

  // --- requests ---

  /**
   * Waits for the current socket (none while a resume is in flight: A2),
   * sends m and resolves to the lease its result carries; an error answer
   * throws as the Client would.
   */
  protected async _call(op: string, name: string, m: Msg, opts: SessionCallOptions, hooks: CallHooks = {}): Promise<Lease> {
    const { onLate, onAnswer, onSettled } = hooks;
    checkSendable(`leasesvc session ${op} "${name}"`, m);
    const timeoutMs = (opts.timeoutMs ?? this._deps.requestTimeoutMs) + (hooks.extraMs ?? 0);
    const until = performance.now() + timeoutMs;
    const signal = opts.signal;
    signal?.throwIfAborted();
    while (this._wire === undefined || !this._current(this._wire)) {
      if (this._ended !== undefined) throw this._ended;
      const left = until - performance.now();
      if (left <= 0) throw new UnavailableError(`leasesvc session ${op} "${name}": unavailable: not connected`);
      const c = this._connected.p;
      await Promise.race([c, sleep(left, signal)]);
      signal?.throwIfAborted();
    }
    if (this._ended !== undefined) throw this._ended;
    const wire = this._wire;
    const id = this._nextId++;
    const answer = await new Promise<Msg>((resolve, reject) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        onSettled?.();
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
      this._pending.set(id, {
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
      if (err instanceof LeaseLostError) this._forget(name, num(m["fencingToken"]));
      throw err;
    }
    if (answer["type"] !== "result") throw new InternalError(`leasesvc session ${op} "${name}": unexpected answer ${JSON.stringify(answer["type"])}`);
    return parseLease(answer["lease"]);
  }

  /** Stops waiting for request id; a late answer goes to onLate. */
  #abandon(id: number, onLate?: (msg: Msg) => void): void {
    const p = this._pending.get(id);
    if (p === undefined) return;
    this._pending.set(id, {
      wire: p.wire,
      resolve: (msg) => {
        if (msg["type"] === "result") onLate?.(msg);
      },
      reject: () => {},
    });
  }
}

export function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

export function deferred(): { p: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const p = new Promise<void>((r) => (resolve = r));
  return { p, resolve };
}

