import type { Clock } from "./clock.js";
import { stopTime } from "./deadline.js";
import { SafeDeadlineError } from "./errors.js";
import type { Holding } from "./holding.js";
import type { Lease } from "./lease.js";

export { permanent } from "./plainholding.js";

/**
 * Where one term of leadership stands: "renewing" while the holding is
 * kept and its deadline moves; "stopped" once the term stopped leading
 * while the service may still count the holding as this Elector's (the
 * deadline came, a renewal was refused for good, or the Elector stopped
 * leading): a release may still end it early; "gone" once the service
 * ended the holding (lost, revoked, transferred): nothing to release;
 * "released" once the Elector released it.
 */
export type TermPhase = "renewing" | "stopped" | "gone" | "released";

/** What a term needs: its holding and the callbacks and values of leading on it. No Elector. */
export interface TermDeps {
  /** The holding the term leads on (a Keeper's). */
  readonly holding: Holding;
  readonly clock: Clock;
  readonly logger: { info(message: string, fields?: Record<string, unknown>): void; warn(message: string, fields?: Record<string, unknown>): void };
  /** How long before the holding's deadline leading ends (the Elector's CancelBefore, checked by cancelBeforeFor), ms. */
  readonly cancelBeforeMs: number;
  /** Ends leadership with reason: the term can no longer be led on. */
  end(reason: unknown): void;
  /** A preempting candidate asks the holding to step down. */
  yieldRequested(to: string): void;
  /** The deadline moved (a renewal, an acknowledged heartbeat): lease is the latest, sentAt the confirmation's send time, stopAt the new end of leading. */
  renewed(lease: Lease, sentAt: number, stopAt: number): void;
}

/**
 * Term is one term of leadership on a Holding: it leads while
 * clock.now() < stopTime(holding.deadline, cancelBeforeMs), re-arming its stop timer
 * whenever the holding's deadline moves, and ends the term (deps.end) when
 * the holding is lost or refused or the stop time comes first. The
 * deadline itself is the holding's: the term never computes one.
 */
export class Term {
  readonly token: number;
  /** The holding led on. */
  readonly holding: Holding;
  /** Why the holding takes no more checkpoints; undefined while it can. */
  closed: unknown;
  #phase: TermPhase = "renewing";
  #stopTimer: unknown;
  readonly #d: TermDeps;
  #unwatch: (() => void) | undefined;

  /** A renewing term of deps.holding; start arms it. */
  constructor(deps: TermDeps) {
    this.#d = deps;
    this.holding = deps.holding;
    this.token = deps.holding.token;
  }

  /** Where the term stands. */
  get phase(): TermPhase {
    return this.#phase;
  }

  /** The keeper's clock time when the confirmation the deadline counts from was sent. */
  get sentAt(): number {
    return this.holding.confirmedAt;
  }

  /** When leading ends unless the holding's deadline moves first. */
  get stopAt(): number {
    return stopTime(this.holding.deadline, this.#d.cancelBeforeMs);
  }

  /** Listens to the holding and arms the stop timer. */
  start(): void {
    let deadline = this.holding.deadline;
    this.#unwatch = this.holding.onChange((ev) => {
      if (ev.kind === "moved") {
        if (this.#phase !== "renewing") return;
        if (ev.lease.yieldRequested && ev.lease.yieldTo !== "") this.#d.yieldRequested(ev.lease.yieldTo);
        if (ev.deadline === deadline) return;
        deadline = ev.deadline;
        this.#armStop();
        this.#d.renewed(ev.lease, ev.confirmedAt, this.stopAt);
        return;
      }
      const wasRenewing = this.#phase === "renewing";
      this.closed ??= ev.error;
      if (!this.holding.releasable) this.#phase = "gone";
      else if (this.#phase === "renewing") this.#phase = "stopped";
      this.#stop();
      if (!wasRenewing) return;
      this.#d.logger.warn("leasesvc elector: leadership lost", { ...this.#log(), err: String(ev.error) });
      this.#d.end(ev.error);
    });
    const l = this.holding.lease;
    if (l.yieldRequested && l.yieldTo !== "") this.#d.yieldRequested(l.yieldTo);
    this.#armStop();
  }

  #log(): Record<string, unknown> {
    return { lease: this.holding.name, holder: this.holding.holder, fencingToken: this.token };
  }

  #armStop(): void {
    const c = this.#d.clock;
    c.clearTimeout(this.#stopTimer);
    this.#stopTimer = c.setTimeout(() => this.#onStop(), Math.max(0, this.stopAt - c.now()));
  }

  #onStop(): void {
    if (this.#phase !== "renewing") return;
    if (this.#d.clock.now() < this.stopAt) {
      this.#armStop();
      return;
    }
    this.#phase = "stopped";
    const why = new Error("no confirmation of the holding in time");
    this.#d.logger.warn("leasesvc elector: safe deadline reached", { ...this.#log(), err: String(why) });
    this.#d.end(new SafeDeadlineError(why));
  }

  /** The service handed the holding over to to (Elector.transfer). */
  transferred(to: string, reason: unknown): void {
    this.#phase = "gone";
    this.closed ??= reason;
    this.#stop();
    this.#d.logger.info("leasesvc elector: transferred", { ...this.#log(), to });
    this.#d.end(reason);
  }

  #stop(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
    this.#d.clock.clearTimeout(this.#stopTimer);
  }

  /**
   * Ends the term once the leading callback has returned: it stops
   * listening and, when release is true and the holding is not gone,
   * releases it with the staged checkpoint; otherwise it stops keeping it.
   */
  async finish(release: boolean): Promise<void> {
    if (this.#phase === "renewing") this.#phase = "stopped";
    this.#stop();
    if (!release || this.#phase === "gone") {
      this.holding.drop();
      return;
    }
    this.closed ??= new Error("released");
    this.#phase = "released";
    try {
      await this.holding.release();
    } catch (err) {
      this.#d.logger.warn("leasesvc elector: release failed; the lease runs out at its expiry", { ...this.#log(), err: String(err) });
    }
  }
}
