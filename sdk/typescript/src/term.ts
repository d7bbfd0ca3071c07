import { performance } from "node:perf_hooks";
import type { Client } from "./client.js";
import { DeniedError, InvalidArgumentError, type LeaseError, LeaseLostError, SafeDeadlineError } from "./errors.js";
import type { Lease } from "./lease.js";
import type { Session } from "./session.js";

/**
 * Where one term of leadership stands: "renewing" while the holding is
 * this Elector's and renewals move its safe deadline; "stopped" once the
 * term stopped renewing while the service may still count the holding as
 * this Elector's (the safe deadline passed, a renew was refused for good,
 * or the Elector stopped leading): a release may still end it early;
 * "gone" once the service ended the holding (lost, revoked, transferred):
 * nothing to release; "released" once the Elector released it.
 */
export type TermPhase = "renewing" | "stopped" | "gone" | "released";

/** What a term needs of its Elector. */
export interface TermHost {
  readonly client: Client;
  readonly name: string;
  readonly holder: string;
  readonly logger: { info(message: string, fields?: Record<string, unknown>): void; warn(message: string, fields?: Record<string, unknown>): void };
  /**
   * How long after sending a successful acquire or renew (through a
   * session: the last acknowledged heartbeat) the leading signal may stay
   * live, ms.
   */
  readonly spanMs: number;
  /** The session the holding is led through; undefined for plain renewals. */
  readonly session?: Session | undefined;
  /** A preempting candidate asks the holding to step down (a session's yield push). */
  yieldRequested?(to: string): void;
  /** Bounds the release. */
  readonly releaseTimeoutMs: number;
  /** When the next renew is due after one sent now, ms (jittered). */
  renewDelay(): number;
  /** How long to wait before retrying after the failures-th failed renew in a row, ending in err. */
  retryDelay(err: unknown, failures: number): number;
  /** Bounds one renew attempt. */
  attemptTimeoutMs(): number;
  /** Ends leadership with reason: the term can no longer be led on. */
  end(reason: unknown): void;
  /** A renew succeeded (l is its answer), or a session's heartbeat sent at sentAt was acknowledged (l undefined): deadline is the new one (performance.now()). */
  renewed(l: Lease | undefined, sentAt: number, deadline: number): void;
}

/** permanent reports whether err cannot go away by retrying. */
export function permanent(err: unknown): boolean {
  return err instanceof InvalidArgumentError || err instanceof DeniedError;
}

/**
 * Term is one holding of the lease: it renews it, keeps its safe deadline
 * (the send time of the last successful acquire or renew + ttlMs × (1 −
 * driftMargin), armed spanMs after that send), carries the checkpoint
 * pending for the next write, and releases the holding. The Elector's
 * campaign decides when to lead and when to stop; the term only tells it,
 * through host.end, when the holding can no longer be led on. Like etcd's
 * concurrency.Session beside its Election, the deadline lives here alone.
 *
 * Through a session (host.session) the term sends no renewals: the
 * session's acknowledged heartbeats move its deadline (the send time of the
 * last acknowledged heartbeat + spanMs), its pushes end it (lost, revoked)
 * or ask it to step down (yield), and checkpoints, the release and the
 * transfer travel over the session's socket.
 */
export class Term {
  readonly token: number;
  /** The latest checkpoint not yet known to be stored. */
  pending: Record<string, unknown> | undefined;
  /** Counts checkpoints set, so a renew clears only what it sent. */
  gen = 0;
  /** Why the holding takes no more checkpoints; undefined while it can. */
  closed: unknown;
  #phase: TermPhase = "renewing";
  /** performance.now() when the acquire or renew that last succeeded was sent. */
  #sentAt: number;
  #inFlight = false;
  #failures = 0;
  #lastErr: unknown;
  #renewAbort: AbortController | undefined;
  #stopTimer: ReturnType<typeof setTimeout> | undefined;
  #renewTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #h: TermHost;
  #unwatch: (() => void) | undefined;

  /** A renewing term of the holding with fencing token token, confirmed by a request sent at sentAt; start arms its timers. */
  constructor(host: TermHost, token: number, sentAt: number) {
    this.#h = host;
    this.token = token;
    this.#sentAt = sentAt;
  }

  /** The session the holding is led through; undefined for plain renewals. */
  get session(): Session | undefined {
    return this.#h.session;
  }

  /** Where the term stands. */
  get phase(): TermPhase {
    return this.#phase;
  }

  /** performance.now() when the acquire or renew that last succeeded was sent. */
  get sentAt(): number {
    return this.#sentAt;
  }

  /** When the leading signal is due to be aborted if no renew succeeds first (performance.now()). */
  get stopAt(): number {
    return this.#sentAt + this.#h.spanMs;
  }

  /** Arms the safe deadline's timer and the first renewal's (through a session: listens to it instead). */
  start(): void {
    const s = this.#h.session;
    if (s !== undefined) {
      this.#sentAt = s.lastAckSentAt;
      this.#unwatch = s.watchHolding(this.#h.name, {
        token: this.token,
        lost: (err) => this.#onLost(err),
        yieldTo: (to) => {
          if (this.#phase === "renewing") this.#h.yieldRequested?.(to);
        },
        acked: (sentAt) => {
          if (this.#phase !== "renewing") return;
          this.#sentAt = sentAt;
          this.#armStop();
          this.#h.renewed(undefined, sentAt, this.stopAt);
        },
      });
      this.#armStop();
      return;
    }
    this.#armStop();
    this.#armRenew(this.#sentAt + this.#h.renewDelay() - performance.now());
  }

  /** The session ended the holding (a lost or revoked push, or the session's end). */
  #onLost(err: LeaseError): void {
    if (this.#phase !== "renewing" && this.#phase !== "stopped") return;
    const wasRenewing = this.#phase === "renewing";
    this.#phase = "gone";
    this.closed ??= err;
    this.#stop();
    if (wasRenewing) {
      this.#h.logger.warn("leasesvc elector: leadership lost", { ...this.#log(), err: String(err) });
      this.#h.end(err);
    }
  }

  /** Writes checkpoint now with a renew (through the session when there is one); resolves to its answer. */
  write(checkpoint: Record<string, unknown> | undefined, opts: { signal?: AbortSignal | undefined; timeoutMs: number }): Promise<Lease> {
    const s = this.#h.session;
    const req = { holder: this.#h.holder, fencingToken: this.token, checkpoint };
    if (s !== undefined) return s.renew(this.#h.name, req, { signal: opts.signal, timeoutMs: opts.timeoutMs });
    return this.#h.client.renew(this.#h.name, req, { signal: opts.signal, maxAttempts: 1, timeoutMs: opts.timeoutMs });
  }

  #log(): Record<string, unknown> {
    return { lease: this.#h.name, holder: this.#h.holder, fencingToken: this.token };
  }

  #armStop(): void {
    clearTimeout(this.#stopTimer);
    this.#stopTimer = setTimeout(() => this.#onDeadline(), Math.max(0, this.stopAt - performance.now()));
  }

  #armRenew(delay: number): void {
    clearTimeout(this.#renewTimer);
    this.#renewTimer = setTimeout(() => this.#onRenewTimer(), Math.max(0, delay));
  }

  #onDeadline(): void {
    if (this.#phase !== "renewing") return;
    this.#phase = "stopped";
    clearTimeout(this.#renewTimer);
    this.#renewAbort?.abort();
    this.#lastErr ??= new Error(this.#h.session !== undefined ? "no heartbeat of the session acknowledged in time" : "no answer to the renew in time");
    this.#h.logger.warn("leasesvc elector: safe deadline reached", { ...this.#log(), err: String(this.#lastErr) });
    this.#h.end(new SafeDeadlineError(this.#lastErr));
  }

  #onRenewTimer(): void {
    if (this.#phase !== "renewing" || this.#inFlight) return;
    this.#inFlight = true;
    const ac = new AbortController();
    this.#renewAbort = ac;
    const at = performance.now();
    const checkpoint = this.pending;
    const gen = this.gen;
    this.#h.client.renew(this.#h.name, { holder: this.#h.holder, fencingToken: this.token, checkpoint }, { signal: ac.signal, maxAttempts: 1, timeoutMs: this.#h.attemptTimeoutMs() }).then(
      (l) => {
        if (checkpoint !== undefined && this.gen === gen) this.pending = undefined; // stored
        this.#onResult(undefined, at, l);
      },
      (err: unknown) => this.#onResult(err ?? new Error("renew failed"), at),
    );
  }

  #onResult(err: unknown, at: number, l?: Lease): void {
    this.#inFlight = false;
    if (this.#phase !== "renewing") return;
    if (err === undefined) {
      this.#failures = 0;
      this.#lastErr = undefined;
      this.#sentAt = at;
      this.#armStop();
      this.#armRenew(at + this.#h.renewDelay() - performance.now());
      this.#h.renewed(l!, at, this.stopAt);
      return;
    }
    if (err instanceof LeaseLostError || permanent(err)) {
      this.#phase = err instanceof LeaseLostError ? "gone" : "stopped";
      this.closed ??= err;
      clearTimeout(this.#stopTimer);
      this.#h.logger.warn("leasesvc elector: leadership lost", { ...this.#log(), err: String(err) });
      this.#h.end(err);
      return;
    }
    this.#lastErr = err;
    this.#h.logger.warn("leasesvc elector: renew failed", { ...this.#log(), err: String(err) });
    this.#armRenew(this.#h.retryDelay(err, this.#failures));
    this.#failures++;
  }

  /** The service handed the holding over to to (Elector.transfer). */
  transferred(to: string, reason: unknown): void {
    this.#phase = "gone";
    this.closed ??= reason;
    this.#stop();
    this.#h.logger.info("leasesvc elector: transferred", { ...this.#log(), to });
    this.#h.end(reason);
  }

  #stop(): void {
    this.#unwatch?.();
    this.#unwatch = undefined;
    clearTimeout(this.#stopTimer);
    clearTimeout(this.#renewTimer);
    this.#renewAbort?.abort();
  }

  /**
   * Ends the term once the leading callback has returned: it stops
   * renewing and, when release is true and the holding is not gone,
   * releases it with the pending checkpoint.
   */
  async finish(release: boolean): Promise<void> {
    if (this.#phase === "renewing") this.#phase = "stopped";
    this.#stop();
    if (release && this.#phase !== "gone") await this.#release();
  }

  async #release(): Promise<void> {
    const checkpoint = this.pending;
    this.pending = undefined;
    this.closed ??= new Error("released");
    this.#phase = "released";
    try {
      const signal = AbortSignal.timeout(this.#h.releaseTimeoutMs);
      const s = this.#h.session;
      if (s !== undefined) {
        if (s.ended) return; // the service released it with the session
        await s.release(this.#h.name, this.#h.holder, this.token, { signal, checkpoint });
      } else {
        await this.#h.client.release(this.#h.name, this.#h.holder, this.token, { signal, checkpoint });
      }
    } catch (err) {
      this.#h.logger.warn("leasesvc elector: release failed; the lease runs out at its expiry", { ...this.#log(), err: String(err) });
    }
  }
}
