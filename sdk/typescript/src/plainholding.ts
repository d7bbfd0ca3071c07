import type { Client } from "./client.js";
import { DeniedError, InvalidArgumentError, LeaseLostError } from "./errors.js";
import { deadlineOf } from "./deadline.js";
import { type HoldRequest, Holding, type HoldingDeps, type Keeping, type LetGo } from "./holding.js";
import type { Lease } from "./lease.js";

export type { HoldRequest } from "./holding.js";

/** permanent reports whether err cannot go away by retrying. */
export function permanent(err: unknown): boolean {
  return err instanceof InvalidArgumentError || err instanceof DeniedError;
}

/** How a keeper renews plainly. */
export interface PlainConfig {
  readonly client: Client;
  readonly ttlMs: number;
  readonly driftMargin: number;
  /** The renewal interval before jitter, ms. */
  readonly renewIntervalMs: number;
  /** When the next renew is due after one sent now, ms (jittered). */
  renewDelay(): number;
  /** How long to wait before retrying after the failures-th failed renew in a row, ending in err. */
  retryDelay(err: unknown, failures: number): number;
  /** Bounds one renew attempt, ms. */
  readonly attemptTimeoutMs: number;
}

/**
 * PlainHolding keeps a lease with REST renewals every renewDelay, retried
 * with backoff. Its deadline is the send time of the last acquire or renew
 * that succeeded + ttlMs × (1 − driftMargin): the service decided the
 * holding's expiry after that send, so no other holder can start before
 * it, provided the clocks run at rates within driftMargin of each other.
 */
export class PlainHolding extends Holding {
  readonly mode = "plain" as const;
  readonly periodMs: number;
  readonly #cfg: PlainConfig;
  #sentAt: number;
  #inFlight = false;
  #failures = 0;
  #renewTimer: unknown;
  #renewAbort: AbortController | undefined;

  constructor(deps: HoldingDeps, cfg: PlainConfig, lease: Lease, holder: string, sentAt: number) {
    super(deps, lease, holder);
    this.#cfg = cfg;
    this.periodMs = cfg.ttlMs;
    this.#sentAt = sentAt;
  }

  /** The plain deadline: the send time of the last successful acquire or renew + TTL × (1 − driftMargin) (deadlineOf). */
  get deadline(): number {
    return deadlineOf(this.#sentAt, this.#cfg.ttlMs, this.#cfg.driftMargin);
  }

  get confirmedAt(): number {
    return this.#sentAt;
  }

  override start(): void {
    super.start();
    this.#armRenew(this.#sentAt + this.#cfg.renewDelay() - this.deps.clock.now());
  }

  /**
   * Acquires name (waiting on the service up to req.waitMs) and resolves
   * to the holding, not yet started. An acquire that waited long is
   * confirmed by a renew sent at once, so the deadline is not mostly spent.
   */
  static async acquire(deps: HoldingDeps, cfg: PlainConfig, name: string, req: HoldRequest, signal: AbortSignal | undefined): Promise<PlainHolding> {
    const clock = deps.clock;
    const sent = clock.now();
    const waitMs = req.waitMs ?? 0;
    const l = await cfg.client.acquire(
      name,
      { holder: req.holder, ttlMs: cfg.ttlMs, metadata: req.metadata, waitMs, priority: req.priority, preempt: req.preempt },
      { signal, maxAttempts: 1 },
    );
    if (clock.now() - sent <= cfg.renewIntervalMs / 2) return new PlainHolding(deps, cfg, l, req.holder, sent);
    const now = clock.now();
    try {
      const r = await cfg.client.renew(name, { holder: req.holder, fencingToken: l.fencingToken }, { signal, maxAttempts: 1, timeoutMs: cfg.attemptTimeoutMs });
      // The checkpoint survives its holding: keep what the acquire inherited.
      const lease = r.checkpoint === null ? { ...r, checkpoint: l.checkpoint, checkpointToken: l.checkpointToken } : r;
      return new PlainHolding(deps, cfg, lease, req.holder, now);
    } catch (err) {
      if (signal?.aborted || err instanceof LeaseLostError) throw err; // it ran out meanwhile: acquire again
      return new PlainHolding(deps, cfg, l, req.holder, sent); // hold on the acquire's deadline, however short
    }
  }

  /** Releases a holding of name by holder that an abandoned acquire may have obtained without hearing of it. */
  static async abandon(client: Client, name: string, holder: string, signal: AbortSignal): Promise<void> {
    try {
      const l = await client.get(name, { signal });
      if (l.held && l.holder === holder) await client.release(name, holder, l.fencingToken, { signal, maxAttempts: 2 });
    } catch {
      // Best effort: the holding runs out at its expiry.
    }
  }

  protected halt(): void {
    this.deps.clock.clearTimeout(this.#renewTimer);
    this.#renewAbort?.abort();
  }

  #armRenew(delay: number): void {
    this.deps.clock.clearTimeout(this.#renewTimer);
    if (this.state !== "held") return;
    this.#renewTimer = this.deps.clock.setTimeout(() => this.#onRenewTimer(), Math.max(0, delay));
  }

  #onRenewTimer(): void {
    if (this.state !== "held" || this.#inFlight) return;
    this.#inFlight = true;
    const ac = new AbortController();
    this.#renewAbort = ac;
    const at = this.deps.clock.now();
    const checkpoint = this.pending;
    const gen = this.gen;
    this.#cfg.client
      .renew(this.name, { holder: this.holder, fencingToken: this.token, checkpoint }, { signal: ac.signal, maxAttempts: 1, timeoutMs: this.#cfg.attemptTimeoutMs })
      .then(
        (l) => {
          if (checkpoint !== undefined) this.stored(gen);
          this.#onResult(undefined, at, l);
        },
        (err: unknown) => this.#onResult(err ?? new Error("renew failed"), at),
      );
  }

  #onResult(err: unknown, at: number, l?: Lease): void {
    this.#inFlight = false;
    if (this.state !== "held") return;
    if (err === undefined) {
      this.#failures = 0;
      this.#confirm(at, l!);
      this.#armRenew(at + this.#cfg.renewDelay() - this.deps.clock.now());
      return;
    }
    if (err instanceof LeaseLostError) {
      this.lose(err, true);
      return;
    }
    if (permanent(err)) {
      this.refuse(err);
      return;
    }
    this.deps.logger.warn(`${this.deps.logPrefix}: renew failed`, { ...this.fields(), err: String(err) });
    this.#armRenew(this.#cfg.retryDelay(err, this.#failures));
    this.#failures++;
  }

  #confirm(at: number, l: Lease): void {
    if (at > this.#sentAt) this.#sentAt = at;
    this.moved(l);
  }

  protected async write(checkpoint: Record<string, unknown> | undefined, signal: AbortSignal | undefined, sentAt: number): Promise<Lease> {
    const l = await this.#cfg.client.renew(this.name, { holder: this.holder, fencingToken: this.token, checkpoint }, { signal, maxAttempts: 1, timeoutMs: this.#cfg.attemptTimeoutMs });
    if (this.state === "held") this.#confirm(sentAt, l);
    return l;
  }

  protected sendRelease(req: LetGo, signal: AbortSignal): Promise<Lease> {
    return this.#cfg.client.release(this.name, req.holder, req.fencingToken, { signal, checkpoint: req.checkpoint });
  }

  protected sendTransfer(req: LetGo & { to: string; reserveMs?: number | undefined }, signal: AbortSignal): Promise<Lease> {
    return this.#cfg.client.transfer(this.name, req, { signal });
  }
}

/**
 * PlainKeeping is a keeper's plain mode (rule L1): every holding is a
 * PlainHolding, acquired with the keeper's TTL and renewed every
 * renewIntervalMs until it ends (rule L4).
 */
export class PlainKeeping implements Keeping {
  readonly mode = "plain" as const;
  readonly spanName = "TTL";
  readonly failed: unknown = undefined;
  readonly #cfg: PlainConfig;

  constructor(cfg: PlainConfig) {
    this.#cfg = cfg;
  }

  get spanMs(): number {
    return this.#cfg.ttlMs;
  }

  get driftMargin(): number {
    return this.#cfg.driftMargin;
  }

  acquire(deps: HoldingDeps, name: string, req: HoldRequest, _aheadMs: number, signal: AbortSignal | undefined): Promise<Holding> {
    return PlainHolding.acquire(deps, this.#cfg, name, req, signal);
  }

  abandon(name: string, holder: string, signal: AbortSignal): Promise<void> {
    return PlainHolding.abandon(this.#cfg.client, name, holder, signal);
  }

  close(): void {}
}
