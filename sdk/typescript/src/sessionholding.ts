import { type Clock, clockSleep } from "./clock.js";
import { type LeaseError, LeaseLostError, UnavailableError } from "./errors.js";
import { type HoldRequest, Holding, type HoldingDeps, type Keeping, type LetGo } from "./holding.js";
import type { Lease } from "./lease.js";
import { type Session, SessionEndedError } from "./session.js";

/**
 * SessionHolding keeps a lease through a session (docs/contract.md §14):
 * the session's acknowledged heartbeats that arrived after the holding's
 * answer move its deadline (Session.holdingDeadline, rule A4: the send
 * time of the last such heartbeat + window × (1 − driftMargin), the
 * session's deadline; before one, no later than the acquire's send time +
 * the session's lease TTL × (1 − driftMargin)), on the session's clock,
 * which is the keeper's (one clock: the holding's timers run on it too);
 * lost and revoked pushes and the session's end end it, always with a
 * LeaseLostError (code "lease_lost"; the session's end is its cause, rule
 * L2); a yield push shows on the lease (yieldRequested); writes, the
 * release and the transfer travel over the session's socket, which keeps
 * rules A1–A3 of moves between sockets.
 */
export class SessionHolding extends Holding {
  readonly mode = "session" as const;
  readonly periodMs: number;
  readonly #s: Session;
  #unwatch: (() => void) | undefined;

  constructor(deps: HoldingDeps, s: Session, lease: Lease, holder: string) {
    super(deps, lease, holder);
    this.#s = s;
    this.periodMs = s.windowMs;
  }

  /** The holding's deadline (written once, in Session.holdingDeadline). */
  get deadline(): number {
    return this.#s.holdingDeadline(this.name, this.token);
  }

  get confirmedAt(): number {
    return this.#s.holdingConfirmedAt(this.name, this.token);
  }

  /**
   * Acquires name through s and resolves to the holding, not yet started,
   * once its deadline lies more than aheadMs(window) ahead (waiting up to
   * a window for an acknowledged heartbeat: after a late answer, one that
   * arrived after it, A4).
   */
  static async acquire(deps: HoldingDeps, s: Session, name: string, req: HoldRequest, aheadMs: number, signal: AbortSignal | undefined): Promise<SessionHolding> {
    const l = await s.acquire(name, { holder: req.holder, metadata: req.metadata, waitMs: req.waitMs, priority: req.priority, preempt: req.preempt }, { signal });
    const clock = s.clock;
    const until = clock.now() + s.windowMs;
    for (;;) {
      if (s.heldToken(name, req.holder) !== l.fencingToken) throw new UnavailableError(`leasesvc keeper: the holding of "${name}" was lost while acquired`);
      if (s.holdingDeadline(name, l.fencingToken) - aheadMs > clock.now()) break;
      if (s.ended || clock.now() >= until) throw new UnavailableError(`leasesvc keeper: no heartbeat of the session acknowledged in time to hold "${name}"`);
      if (!(await ackOrTimeout(s, clock, until - clock.now(), signal))) throw signal?.reason ?? new Error("aborted");
    }
    // One clock: the holding's deadline timer runs on the session's, which its deadlines are measured on.
    return new SessionHolding({ ...deps, clock }, s, l, req.holder);
  }

  /** Releases a holding of name by holder that an abandoned acquire may have obtained. */
  static async abandon(s: Session, name: string, holder: string, signal: AbortSignal): Promise<void> {
    const token = s.heldToken(name, holder);
    if (token > 0) await s.release(name, holder, token, { signal }).catch(() => undefined);
  }

  override start(): void {
    this.#unwatch = this.#s.watchHolding(this.name, {
      token: this.token,
      lost: (err) => this.lose(lostError(this.name, err), true),
      yieldTo: (to) => this.changed({ ...this.lease, yieldRequested: true, yieldTo: to }),
      acked: () => this.moved(),
    });
    super.start();
  }

  protected halt(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
  }

  protected async write(checkpoint: Record<string, unknown> | undefined, signal: AbortSignal | undefined): Promise<Lease> {
    const l = await this.#s.renew(this.name, { holder: this.holder, fencingToken: this.token, checkpoint }, { signal });
    this.changed(l);
    return l;
  }

  protected async sendRelease(req: LetGo, signal: AbortSignal): Promise<Lease | undefined> {
    if (this.#s.ended) return undefined; // the service released it with the session
    return await this.#s.release(this.name, req.holder, req.fencingToken, { signal, checkpoint: req.checkpoint });
  }

  protected sendTransfer(req: LetGo & { to: string; reserveMs?: number | undefined }, signal: AbortSignal): Promise<Lease> {
    return this.#s.transfer(this.name, req, { signal });
  }
}

/** ackOrTimeout resolves to true at the session's next counted ack or after ms on clock, whichever is first, and to false when signal aborts first. */
async function ackOrTimeout(s: Session, clock: Clock, ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  const stop = new AbortController();
  const both = signal === undefined ? stop.signal : AbortSignal.any([signal, stop.signal]);
  try {
    return await Promise.race([s.acknowledged().then(() => true), clockSleep(clock, ms, both).then((slept) => slept || signal?.aborted !== true)]);
  } finally {
    stop.abort();
  }
}

/** lostError is the error a session holding ends with: err when it is a LeaseLostError, else (the session ended) a LeaseLostError caused by it (rule L2). */
function lostError(name: string, err: LeaseError): LeaseLostError {
  if (err instanceof LeaseLostError) return err;
  return new LeaseLostError(`leasesvc: the holding of "${name}" ended with its session: ${err.message}`, { status: err.status, detail: err.detail, cause: err });
}

/** A session a keeper holds through, and how the keeper lets go of it (closing one it opened, ending its use of the Client's shared one). */
export interface KeptSession {
  readonly session: Session;
  release(): void;
}

/**
 * SessionKeeping is a keeper's session mode (rule L1): every holding is a
 * SessionHolding of the current session, kept by its heartbeats (rule
 * L4). A Session is one-shot: once the service ended it (rule L2) the
 * next acquire opens a new one of the same window through reopen (the
 * keeper's own session, or the Client's shared one) and the mode stays
 * "session"; a session the caller gave has no reopen: acquires then fail
 * with SessionEndedError and failed says so.
 */
export class SessionKeeping implements Keeping {
  readonly mode = "session" as const;
  readonly spanName = "session window";
  readonly spanMs: number;
  readonly driftMargin: number;
  #cur: KeptSession;
  readonly #reopen: (() => Promise<KeptSession>) | undefined;
  #reopening: Promise<KeptSession> | undefined;
  #failed: unknown;
  #closed = false;

  constructor(first: KeptSession, reopen: (() => Promise<KeptSession>) | undefined) {
    this.#cur = first;
    this.#reopen = reopen;
    this.spanMs = first.session.windowMs;
    this.driftMargin = first.session.driftMargin;
  }

  get failed(): unknown {
    return this.#failed;
  }

  /** The session holdings are acquired through now. */
  get session(): Session {
    return this.#cur.session;
  }

  /** The current session, a new one when the service ended it (rule L2). */
  async #current(): Promise<Session> {
    const cur = this.#cur;
    if (!cur.session.ended) return cur.session;
    if (this.#reopen === undefined) {
      this.#failed ??= new SessionEndedError("leasesvc keeper: the session it was given has ended (a given session is not reopened)");
      throw this.#failed;
    }
    const reopen = this.#reopen;
    this.#reopening ??= (async () => {
      const next = await reopen();
      if (this.#closed) {
        next.release();
        throw new Error("leasesvc keeper: closed");
      }
      cur.release();
      this.#cur = next;
      return next;
    })().finally(() => (this.#reopening = undefined));
    return (await this.#reopening).session;
  }

  async acquire(deps: HoldingDeps, name: string, req: HoldRequest, aheadMs: number, signal: AbortSignal | undefined): Promise<Holding> {
    for (let again = 0; ; again++) {
      const s = await this.#current();
      try {
        return await SessionHolding.acquire(deps, s, name, req, aheadMs, signal);
      } catch (err) {
        if (!s.ended || signal?.aborted || !(err instanceof SessionEndedError || err instanceof UnavailableError)) throw err;
        if (this.#reopen === undefined) {
          this.#failed ??= err;
          throw err;
        }
        if (again > 0) throw err;
        // The session ended under the acquire: once more, through a new one.
      }
    }
  }

  abandon(name: string, holder: string, signal: AbortSignal): Promise<void> {
    return SessionHolding.abandon(this.#cur.session, name, holder, signal);
  }

  close(): void {
    this.#closed = true;
    this.#cur.release();
  }
}
