import { performance } from "node:perf_hooks";
import { sleep } from "./backoff.js";
import type { Clock } from "./clock.js";
import { deadlineOf } from "./deadline.js";
import { InvalidArgumentError, LeaseLostError, PermissionDeniedError, RateLimitedError, UnavailableError } from "./errors.js";
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
import { SessionsUnsupportedError, type Wire } from "./socket.js";

export type { HoldingWatcher, SessionAcquireRequest, SessionCallOptions, SessionDeps, SessionOptions, SessionRenewRequest, SessionTransferRequest };
export { problemError, SessionEndedError, SessionLimitError, SessionsUnsupportedError };
import { DroppedError, type Msg, SessionCore, num } from "./sessioncore.js";

export { silentMinMs, silentWindows } from "./sessioncore.js";

/**
 * Session is one session (docs/contract.md §14): a WebSocket to the
 * service that heartbeats every window/4 and through which leases are
 * acquired, written, released and transferred. The service holds the
 * session's leases in its backend at a long TTL and releases them all
 * within the window once the heartbeats stop, so a crashed agent's leases
 * free in about a second instead of a TTL.
 *
 * The session's deadline is (the clock's time, performance.now() by
 * default, when the last heartbeat that was acknowledged was sent) +
 * windowMs × (1 − driftMargin), counting only acks that arrive on a socket
 * no resume went out after: the service acknowledges a heartbeat only
 * while every lease of the session is safe for a window beyond it, so a
 * holder that stops leading at the deadline stops before anyone else may
 * start. A holding's own deadline (holdingDeadline) counts only the acks
 * that arrived after its answer (A4): before one, it is the lower of the
 * session's deadline and its acquire's send time + leaseTtlMs × (1 −
 * driftMargin). The Elector ends every term there, whatever the socket
 * says. A lost or revoked push heard while the acquire of its holding was
 * still unanswered makes that acquire fail with LeaseLostError (A5).
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
 * claimed the holding. Pushes that arrive on a new socket before its
 * resumed are the new socket's: applied, in order, once the resumed is.
 * An epoch or fencing token above 2^53 − 1 from the service is a protocol
 * error (the socket is replaced; the request it answers fails), and none
 * is ever sent. close() ends it and releases its leases at once.
 */
export class Session extends SessionCore {
  private constructor(deps: SessionDeps, opts: SessionOptions) {
    super(deps, opts);
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
    const wire = await s._dial();
    let opened: Msg;
    try {
      opened = await s._handshake(wire, { type: "open", windowMs: s.windowMs });
    } catch (err) {
      wire.close(1000);
      if (err instanceof RateLimitedError) {
        throw new SessionLimitError(err.message, { status: err.status, code: err.code, detail: err.detail, retryAfterMs: err.retryAfterMs, cause: err });
      }
      throw err;
    }
    s._sessionId = String(opened["sessionId"] ?? "");
    s._install(wire, opened, s._resumes);
    try {
      await s._firstAck();
    } catch (err) {
      await s.close().catch(() => undefined);
      throw err;
    }
    return s;
  }

  /** The clock the session's deadlines are on (SessionOptions.clock; performance.now() by default). */
  get clock(): Clock {
    return this._clock;
  }

  /** The clock's time when the last acknowledged heartbeat was sent; 0 before any. */
  get lastAckSentAt(): number {
    return this._lastAck;
  }

  /**
   * The session's safe deadline on its clock: lastAckSentAt + windowMs ×
   * (1 − driftMargin); 0 before the first acknowledgement. Stop acting on
   * the session's leases at it unless a later heartbeat is acknowledged
   * first; a holding's own is holdingDeadline.
   */
  deadline(): number {
    return this._lastAck === 0 ? 0 : deadlineOf(this._lastAck, this.windowMs, this.driftMargin);
  }

  /**
   * The deadline of the session's holding of name with fencingToken on the
   * session's clock (docs/contract.md §14, A4): the send time of the last
   * heartbeat whose ack arrived on the current socket after the holding's
   * answer (its acquire's result, or the resumed that listed it) +
   * windowMs × (1 − driftMargin), the session's deadline when acks come in
   * order; before such an ack, the lower of the session's deadline and
   * the acquire's send time + leaseTtlMs × (1 − driftMargin). 0 when the
   * session does not hold it.
   */
  holdingDeadline(name: string, fencingToken: number): number {
    return this.#holdingTimes(name, fencingToken).deadline;
  }

  /** The send time of the confirmation holdingDeadline counts from: a heartbeat's, or the acquire's while its own bound is the lower; 0 when the session does not hold it. */
  holdingConfirmedAt(name: string, fencingToken: number): number {
    return this.#holdingTimes(name, fencingToken).confirmedAt;
  }

  #holdingTimes(name: string, token: number): { deadline: number; confirmedAt: number } {
    return this._held.deadline(name, token, this.deadline(), this._lastAck, this.windowMs, this.leaseTtlMs, this.driftMargin);
  }

  /** Resolves at the next acknowledged heartbeat that counts (it may confirm a holding, A4), or when the session ends. */
  acknowledged(): Promise<void> {
    return this._ackSeen();
  }

  /** Whether the session has ended (closed, or unknown to the service on resume). */
  get ended(): boolean {
    return this._ended !== undefined;
  }

  /** Whether a socket is up now (false while reconnecting or after the end). */
  get connected(): boolean {
    return this._wire !== undefined && this._ended === undefined;
  }

  /** The names of the leases the session holds, as far as it knows. */
  leases(): string[] {
    return [...this._held.keys()];
  }

  /** The fencing token of the holding of name by holder that the session holds; 0 when it holds none. */
  heldToken(name: string, holder: string): number {
    const h = this._held.get(name);
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
    const timeoutMs = opts.timeoutMs ?? this._deps.requestTimeoutMs;
    const until = performance.now() + timeoutMs + waitMs;
    const onLate = (late: Msg): void => {
      // Abandoned: a holding granted after all is not wanted.
      const got = parseLease(late["lease"]);
      if (got.held && got.holder === req.holder) void this.release(name, req.holder, got.fencingToken).catch(() => undefined);
    };
    /** The token of a holding answered on a socket a resume began after (0: none). */
    let unvouched = 0;
    // A5: the lost and revoked pushes for name heard while this acquire is in flight are remembered until it is over.
    const over = this._held.begin(name);
    try {
      for (;;) {
        let vouched = false;
        let lostFirst: LeaseLostError | undefined;
        let sentAt = 0;
        let settled: () => void = () => undefined;
        // Taken into the table as the answer arrives, so that a resume
        // listing the holdings from now on claims it, and so that the acks
        // after it, and only they, count for it (A4).
        const onAnswer = (ans: Msg, from: Wire): void => {
          if (ans["type"] !== "result") return;
          const got = parseLease(ans["lease"]);
          if (!got.held || got.holder !== req.holder) return;
          const early = this._held.lostBefore(name, got.fencingToken);
          if (early !== undefined) {
            // A5: its lost (or revoked) came first: the holding has left the instance's table.
            lostFirst = new LeaseLostError(`leasesvc session acquire "${name}": the holding (fencing token ${got.fencingToken}) was reported lost before its answer: ${early.message}`, { status: 409, detail: early.detail });
            return;
          }
          vouched = this._current(from);
          this._held.answered(name, req.holder, got.fencingToken, from, vouched, sentAt);
        };
        const onSend = (w: Wire): void => {
          sentAt = this._clock.now();
          settled = this._held.sending(name, w);
        };
        let l: Lease;
        try {
          const left = until - performance.now();
          if (unvouched !== 0 && left <= 0) throw new UnavailableError(`leasesvc session acquire "${name}": unavailable: no answer through the resumed socket within ${timeoutMs + waitMs} ms`);
          l = await this._call("acquire", name, m, { signal: opts.signal, timeoutMs: left }, { onLate, onAnswer, onSend, onSettled: () => settled() });
        } catch (err) {
          if (unvouched !== 0) {
            // Given up: the holding is not led; let it go.
            this._forget(name, unvouched);
            void this.release(name, req.holder, unvouched).catch(() => undefined);
          }
          throw err;
        }
        if (lostFirst !== undefined) {
          if (unvouched !== 0) this._forget(name, unvouched);
          throw lostFirst;
        }
        if (!l.held || l.holder !== req.holder) {
          if (unvouched !== 0) this._forget(name, unvouched);
          return l;
        }
        if (vouched) {
          this._noteYield(l);
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
        this._log.info("leasesvc session: an acquire was answered on a socket a resume replaced; acquiring it again through the resumed one", { name, fencingToken: l.fencingToken });
      }
    } finally {
      over();
    }
  }

  /** Writes metadata or a checkpoint of a session-held holding. Anything but the live holding: LeaseLostError. */
  async renew(name: string, req: SessionRenewRequest, opts: SessionCallOptions = {}): Promise<Lease> {
    const m: Msg = { type: "renew", name, holder: req.holder, fencingToken: req.fencingToken };
    if (req.metadata !== undefined) m["metadata"] = req.metadata;
    if (req.checkpoint !== undefined) m["checkpoint"] = req.checkpoint;
    const l = await this._call("renew", name, m, opts);
    this._noteYield(l);
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
    // From the moment it goes out the holding is not led: the instance may
    // end it any time after, and no ack says when (docs/contract.md §14,
    // A6). Only a refusal of the request itself (nothing was written)
    // gives the lead back.
    this._held.letGoing(name, token, true);
    try {
      return await this.#letGoing(op, name, token, m, opts);
    } catch (err) {
      if (err instanceof InvalidArgumentError || err instanceof PermissionDeniedError || err instanceof RateLimitedError) this._held.letGoing(name, token, false);
      throw err;
    }
  }

  /** #letGo's attempts. */
  async #letGoing(op: "release" | "transfer", name: string, token: number, m: Msg, opts: SessionCallOptions): Promise<Lease> {
    const until = performance.now() + (opts.timeoutMs ?? this._deps.requestTimeoutMs);
    let done: Lease | undefined;
    for (;;) {
      let on: Wire | undefined;
      let from: Wire | undefined;
      let retryAt = Infinity;
      try {
        const l = await this._call(op, name, m, { signal: opts.signal, timeoutMs: until - performance.now() }, { onSend: (w) => (on = w), onAnswer: (_, f) => (from = f) });
        if (from === undefined || this._current(from) || this._held.get(name)?.token !== token) {
          this._forget(name, token);
          return l;
        }
        done = l;
        this._log.info(`leasesvc session: a ${op} was answered on a socket a resume replaced; sending it again through the resumed one`, { name, fencingToken: token });
      } catch (err) {
        if (err instanceof LeaseLostError && done !== undefined) return done;
        const again = err instanceof DroppedError || (err instanceof UnavailableError && err.status === 503 && err.code === "unavailable");
        if (!again || on === undefined || this._held.get(name)?.token !== token) throw err;
        if (!(err instanceof DroppedError)) retryAt = performance.now() + 1000; // Retry-After: 1
        this._log.info(`leasesvc session: a ${op} is sent again through the resumed socket`, { name, fencingToken: token, err: String(err) });
      }
      // Wait for a socket whose resume began after the attempt was sent.
      const after = on === undefined ? -1 : (this._stamps.get(on)?.resumes ?? -1);
      for (;;) {
        if (this._ended !== undefined) throw this._ended;
        if (this._held.get(name)?.token !== token) {
          if (done !== undefined) return done;
          throw new LeaseLostError(`leasesvc session ${op} "${name}": the holding was lost while the session resumed`, { status: 409 });
        }
        const w = this._wire;
        if (w !== undefined && this._current(w) && ((this._stamps.get(w)?.resumes ?? -1) > after || performance.now() >= retryAt)) break;
        const left = until - performance.now();
        if (left <= 0) throw new UnavailableError(`leasesvc session ${op} "${name}": unavailable: not answered through a resumed socket within the timeout`);
        await Promise.race([this._connected.p, sleep(Math.min(left, retryAt - performance.now()), opts.signal)]);
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
    let set = this._watchers.get(name);
    if (set === undefined) this._watchers.set(name, (set = new Set()));
    set.add(w);
    if (this._ended !== undefined) queueMicrotask(() => w.lost(this._ended!));
    // A yield request that came while no term listened (between terms, say) is not lost.
    const y = this._yields.get(name);
    if (y !== undefined && y.token === w.token) queueMicrotask(() => w.yieldTo(y.to));
    return () => {
      set.delete(w);
      if (set.size === 0 && this._watchers.get(name) === set) this._watchers.delete(name);
    };
  }

  /**
   * Ends the session: every holding led through it is told (lost) first,
   * then the service is asked to close it, which releases its leases at
   * once. Resolves when the service answered (or after the request
   * timeout); repeated calls are no-ops.
   */
  async close(): Promise<void> {
    if (this._closing) return;
    this._closing = true;
    this._end(new SessionEndedError("leasesvc session: closed"));
    const wire = this._wire;
    if (wire !== undefined) {
      const id = this._nextId++;
      const answered = new Promise<void>((resolve) => {
        this._pending.set(id, { wire, resolve: () => resolve(), reject: () => resolve() });
      });
      wire.send(JSON.stringify({ type: "close", id }));
      const timer = setTimeout(() => this._pending.get(id)?.reject(undefined), this._deps.requestTimeoutMs);
      await answered;
      clearTimeout(timer);
      this._pending.delete(id);
    }
    this._wire = undefined;
    wire?.close(1000);
    for (const w of this._retiring) w.close(1000);
    this._retiring.clear();
  }
}
