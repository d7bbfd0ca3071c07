import type { Clock } from "./clock.js";
import { LeaseError, LeaseLostError } from "./errors.js";
import type { Lease } from "./lease.js";

/** The largest checkpoint, as compact JSON, the service stores, in bytes. */
export const maxCheckpointBytes = 16 << 10;

/** checkCheckpoint returns v when it is a JSON object of at most maxCheckpointBytes, and throws otherwise. */
export function checkCheckpoint(v: unknown): Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new TypeError("leasesvc: a checkpoint must be a JSON object");
  const n = Buffer.byteLength(JSON.stringify(v), "utf8");
  if (n > maxCheckpointBytes) throw new RangeError(`leasesvc: the checkpoint is ${n} bytes, more than ${maxCheckpointBytes}`);
  return v as Record<string, unknown>;
}

/**
 * What a Holding tells its listeners (Holding.onChange):
 * "moved": its deadline moved (a renewal, an acknowledged heartbeat) or the
 * lease's fields changed (yieldRequested); "lost": the holding ended
 * without the agent ending it (revoked, taken, its session ended, a renew
 * answered lease_lost, or its deadline passed with no confirmation);
 * "refused": the service refused a renewal for good (credentials, a bad
 * argument): the holding is no longer renewed and counts only until its
 * deadline; a release may still end it early.
 */
export type HoldingEvent =
  | { kind: "moved"; lease: Lease; deadline: number; confirmedAt: number }
  | { kind: "lost"; error: LeaseError }
  | { kind: "refused"; error: unknown };

/**
 * Where a holding stands: "held" while kept; "lost", "refused",
 * "released" or "transferred" once it is not; "dropped" once the agent
 * stopped keeping it without a release (Holding.drop).
 */
export type HoldingState = "held" | "lost" | "refused" | "released" | "transferred" | "dropped";

/** What a holding needs of its keeper. */
export interface HoldingDeps {
  readonly clock: Clock;
  readonly logger: { info(message: string, fields?: Record<string, unknown>): void; warn(message: string, fields?: Record<string, unknown>): void };
  /** The prefix of log lines, such as "leasesvc keeper". */
  readonly logPrefix: string;
  /** Bounds a release or transfer without a signal, ms. */
  readonly releaseTimeoutMs: number;
  /** Called once the holding is over, whatever ended it. */
  readonly done: (h: Holding) => void;
}

/** What a hold asks for. */
export interface HoldRequest {
  holder: string;
  metadata?: Record<string, unknown> | undefined;
  waitMs?: number | undefined;
  priority?: number | undefined;
  preempt?: boolean | undefined;
}

/**
 * Keeping is how a keeper keeps its holdings, chosen once per keeper
 * (issue 46, rule L1): PlainKeeping (plainholding.ts) or SessionKeeping
 * (sessionholding.ts). It is the only thing that knows one mode from the
 * other: the keeper asks it for holdings and nothing else branches on the
 * mode.
 */
export interface Keeping {
  /** "session" or "plain". */
  readonly mode: "session" | "plain";
  /** The span deadlines are measured in: the plain TTL or the session's window, ms. */
  readonly spanMs: number;
  /** What the span is, for messages: "TTL" or "session window". */
  readonly spanName: string;
  /** The fraction of spanMs given up to clock-rate differences. */
  readonly driftMargin: number;
  /** Why the keeping can hand out nothing more (a session the caller gave ended); undefined while it can. */
  readonly failed: unknown;
  /**
   * Acquires name and resolves to its holding, not yet started; through a
   * session, once its deadline lies more than aheadMs ahead.
   */
  acquire(deps: HoldingDeps, name: string, req: HoldRequest, aheadMs: number, signal: AbortSignal | undefined): Promise<Holding>;
  /** Releases a holding of name by holder that an abandoned acquire may have obtained without hearing of it (best effort). */
  abandon(name: string, holder: string, signal: AbortSignal): Promise<void>;
  /** Stops keeping: a session the keeper opened is closed (a shared one: its use ends). */
  close(): void;
}

/** The request a release or transfer sends, shaped alike for REST and sessions. */
export interface LetGo {
  holder: string;
  fencingToken: number;
  checkpoint?: Record<string, unknown> | undefined;
}

/**
 * Holding is one lease kept by a Keeper: its latest Lease, its deadline
 * (the monotonic instant, on the keeper's clock, after which the agent
 * must not act as holder unless the deadline moved), and the calls that
 * write, release and hand it over. Subclasses keep it by plain renewals or
 * through a session; each computes the deadline its own way, once.
 */
export abstract class Holding {
  /** The lease's name. */
  readonly name: string;
  /** The holder it is held as. */
  readonly holder: string;
  /** The holding's fencing token: pass it with every write downstream. */
  readonly token: number;
  /** "session" or "plain": how the holding is kept. */
  abstract readonly mode: "session" | "plain";
  /** The period the deadline is measured in: the TTL (plain) or the session's window, ms. */
  abstract readonly periodMs: number;
  protected readonly deps: HoldingDeps;
  #lease: Lease;
  #state: HoldingState = "held";
  #why: unknown;
  /** Whether the service is known to have ended the holding (nothing left to release). */
  #gone = false;
  #pending: Record<string, unknown> | undefined;
  #gen = 0;
  #deadlineTimer: unknown;
  readonly #listeners = new Set<(ev: HoldingEvent) => void>();

  protected constructor(deps: HoldingDeps, lease: Lease, holder: string) {
    this.deps = deps;
    this.name = lease.name;
    this.holder = holder;
    this.token = lease.fencingToken;
    this.#lease = lease;
  }

  /** The latest Lease seen for the holding (fencing token, proof, checkpoint, yieldRequested …). */
  get lease(): Lease {
    return this.#lease;
  }

  /** The deadline on the keeper's clock: after it the agent must not act as holder. */
  abstract get deadline(): number;

  /** The keeper's clock time when the confirmation the deadline counts from was sent. */
  abstract get confirmedAt(): number;

  /** Where the holding stands. */
  get state(): HoldingState {
    return this.#state;
  }

  /** Why the holding is over (the error of a loss, or an Error saying it was released or transferred); undefined while held. */
  get endedBy(): unknown {
    return this.#why;
  }

  /** The checkpoint staged for the next write (a plain renewal, the release, the transfer), if any. */
  get pending(): Record<string, unknown> | undefined {
    return this.#pending;
  }

  /** Stages checkpoint cp (a JSON object of at most 16 KiB) to go with the next renewal, release or transfer, replacing one not yet written. */
  stage(cp: Record<string, unknown>): void {
    this.#pending = checkCheckpoint(cp);
    this.#gen++;
  }

  /** Calls fn for every change until the returned function is called. */
  onChange(fn: (ev: HoldingEvent) => void): () => void {
    this.#listeners.add(fn);
    return () => void this.#listeners.delete(fn);
  }

  /** The log fields of the holding. */
  protected fields(): Record<string, unknown> {
    return { lease: this.name, holder: this.holder, fencingToken: this.token };
  }

  #emit(ev: HoldingEvent): void {
    for (const fn of [...this.#listeners]) {
      try {
        fn(ev);
      } catch (err) {
        this.deps.logger.warn(`${this.deps.logPrefix}: a holding listener failed`, { ...this.fields(), err: String(err) });
      }
    }
  }

  /** Starts keeping: arms the deadline (and, in subclasses, the renewals or the session's watch). */
  start(): void {
    this.armDeadline();
  }

  /** (Re)arms the timer that reports the holding lost when its deadline passes unconfirmed. */
  protected armDeadline(): void {
    const c = this.deps.clock;
    c.clearTimeout(this.#deadlineTimer);
    if (this.#state !== "held") return;
    this.#deadlineTimer = c.setTimeout(() => {
      if (this.#state !== "held") return;
      if (c.now() < this.deadline) {
        this.armDeadline();
        return;
      }
      this.lose(new LeaseLostError(`leasesvc: the holding of "${this.name}" passed its deadline with no confirmation`, { code: "lease_lost" }), false);
    }, Math.max(0, this.deadline - c.now()));
  }

  /** The deadline moved or the lease changed (l: a newer answer); tells the listeners. */
  protected moved(l?: Lease): void {
    if (this.#state !== "held") return;
    if (l !== undefined) this.#merge(l);
    this.armDeadline();
    this.#emit({ kind: "moved", lease: this.#lease, deadline: this.deadline, confirmedAt: this.confirmedAt });
  }

  /** The lease's fields changed without the deadline moving (a yield request). */
  protected changed(l: Lease): void {
    if (this.#state !== "held") return;
    this.#merge(l);
    this.#emit({ kind: "moved", lease: l, deadline: this.deadline, confirmedAt: this.confirmedAt });
  }

  /** Takes l as the latest lease; the checkpoint survives answers that carry none. */
  #merge(l: Lease): void {
    this.#lease = l.checkpoint === null && this.#lease.checkpoint !== null ? { ...l, checkpoint: this.#lease.checkpoint, checkpointToken: this.#lease.checkpointToken } : l;
  }

  /** The holding ended by itself; gone: the service is known to have ended it (nothing to release). */
  protected lose(err: LeaseError, gone: boolean): void {
    if (this.#state !== "held" && this.#state !== "refused") return;
    const wasHeld = this.#state === "held";
    this.#gone ||= gone;
    this.#end("lost", err);
    this.deps.logger.warn(`${this.deps.logPrefix}: holding lost`, { ...this.fields(), err: String(err) });
    if (wasHeld) this.#emit({ kind: "lost", error: err });
  }

  /** The service refused a renewal for good: the holding is not renewed any more. */
  protected refuse(err: unknown): void {
    if (this.#state !== "held") return;
    this.#state = "refused";
    this.#why = err;
    this.halt();
    this.deps.clock.clearTimeout(this.#deadlineTimer);
    this.deps.logger.warn(`${this.deps.logPrefix}: renewal refused`, { ...this.fields(), err: String(err) });
    this.#emit({ kind: "refused", error: err });
  }

  #end(state: HoldingState, why: unknown): void {
    this.#state = state;
    this.#why ??= why;
    this.deps.clock.clearTimeout(this.#deadlineTimer);
    this.halt();
    this.deps.done(this);
  }

  /**
   * Stops keeping the holding without releasing it and without telling
   * the listeners: plain renewals stop (the lease runs out at its expiry);
   * through a session it stays the session's, so acquiring it again
   * through the same session answers it. No-op once it is over.
   */
  drop(): void {
    if (this.#state === "held" || this.#state === "refused") this.#end("dropped", new Error("dropped"));
  }

  /** Stops what keeps the holding (renewal timers, the session's watch); idempotent. */
  protected abstract halt(): void;

  /** Writes now, through whichever way keeps the holding, a renew carrying checkpoint. */
  protected abstract write(checkpoint: Record<string, unknown> | undefined, signal: AbortSignal | undefined, sentAt: number): Promise<Lease>;

  /** Sends the release; resolves to the service's answer, or undefined when nothing was left to release. */
  protected abstract sendRelease(req: LetGo, signal: AbortSignal): Promise<Lease | undefined>;

  /** Sends the transfer. */
  protected abstract sendTransfer(req: LetGo & { to: string; reserveMs?: number | undefined }, signal: AbortSignal): Promise<Lease>;

  /** Whether a release may still act: the service may still count the holding (held, refused, or lost only by its deadline). */
  get releasable(): boolean {
    return this.#state === "held" || this.#state === "refused" || (this.#state === "lost" && !this.#gone);
  }

  /** Whether release or transfer may act: the holding is held, or stopped while the service may still count it. */
  #live(what: string): void {
    if (this.releasable) return;
    throw new LeaseLostError(`leasesvc: cannot ${what} "${this.name}": the holding is over (${String(this.#why)})`, { code: "lease_lost" });
  }

  /**
   * Renews the holding now, writing checkpoint (omitted: the staged one)
   * when given; resolves to the answer once the service stored it. A
   * lease_lost answer ends the holding (lost) and rejects.
   */
  async renew(checkpoint?: Record<string, unknown>, opts: { signal?: AbortSignal } = {}): Promise<Lease> {
    if (this.#state !== "held") throw new LeaseLostError(`leasesvc: cannot renew "${this.name}": the holding is over (${String(this.#why)})`, { code: "lease_lost" });
    const cp = checkpoint === undefined ? this.#pending : checkCheckpoint(checkpoint);
    const gen = this.#gen;
    const sentAt = this.deps.clock.now();
    try {
      const l = await this.write(cp, opts.signal, sentAt);
      if (checkpoint === undefined && cp !== undefined) this.stored(gen); // the staged checkpoint is stored, unless restaged meanwhile
      return l;
    } catch (err) {
      if (err instanceof LeaseLostError) this.lose(err, true);
      throw err;
    }
  }

  /** Clears the staged checkpoint if it is still the one of generation gen (a plain renewal stored it). */
  protected stored(gen: number): void {
    if (this.#gen === gen) this.#pending = undefined;
  }

  /** The generation of the staged checkpoint, for stored. */
  protected get gen(): number {
    return this.#gen;
  }

  /**
   * Releases the holding with checkpoint (omitted: the staged one, if any):
   * it ends (not lost). Resolves to the service's answer, undefined when
   * the session that kept it had already ended (the service released it).
   */
  async release(checkpoint?: Record<string, unknown>, opts: { signal?: AbortSignal } = {}): Promise<Lease | undefined> {
    this.#live("release");
    const cp = checkpoint === undefined ? this.#pending : checkCheckpoint(checkpoint);
    this.#pending = undefined;
    if (this.#state === "held" || this.#state === "refused") this.#end("released", new Error("released"));
    else this.#gone = true;
    const signal = opts.signal ?? AbortSignal.timeout(this.deps.releaseTimeoutMs);
    return await this.sendRelease({ holder: this.holder, fencingToken: this.token, checkpoint: cp }, signal);
  }

  /**
   * Hands the holding over to to (docs/contract.md §8) with checkpoint
   * (omitted: the staged one), reserving the lease for to for reserveMs
   * (omitted: the service's default). On success the holding has ended
   * (not lost); on failure it goes on unless the answer was lease_lost.
   */
  async transfer(to: string, reserveMs?: number, checkpoint?: Record<string, unknown>, opts: { signal?: AbortSignal } = {}): Promise<Lease> {
    this.#live("transfer");
    const cp = checkpoint === undefined ? this.#pending : checkCheckpoint(checkpoint);
    const signal = opts.signal ?? AbortSignal.timeout(this.deps.releaseTimeoutMs);
    try {
      const l = await this.sendTransfer({ holder: this.holder, fencingToken: this.token, to, checkpoint: cp, reserveMs }, signal);
      this.#pending = undefined;
      this.#gone = true;
      if (this.#state === "held" || this.#state === "refused") this.#end("transferred", new Error(`transferred to "${to}"`));
      this.deps.logger.info(`${this.deps.logPrefix}: transferred`, { ...this.fields(), to });
      return l;
    } catch (err) {
      if (err instanceof LeaseLostError) this.lose(err, true);
      throw err;
    }
  }
}
