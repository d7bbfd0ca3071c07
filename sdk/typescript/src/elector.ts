import type { Client } from "./client.js";
import { type Clock, clockSleep } from "./clock.js";
import { LeaseHeldError, LeaseLostError, LeaseReservedError } from "./errors.js";
import { checkCheckpoint } from "./holding.js";
import type { Holding } from "./holding.js";
import type { Keeper } from "./keeper.js";
import { type Lease, validName } from "./lease.js";
import { type ElectorOptions, NotLeadingError, type Resolved, TransferredError, YieldedError, buildKeeper, resolve, timerSlack } from "./electoropts.js";
import { Term, permanent } from "./term.js";

export { defaultHolder } from "./keeper.js";
export { maxCheckpointBytes } from "./holding.js";
export { NotLeadingError, TransferredError, YieldedError, electorDefaults, maxPriority } from "./electoropts.js";
export type { ElectorLogger, ElectorOptions, RenewInfo, TermInfo } from "./electoropts.js";

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
 * Keepers and sessions (docs/contract.md §14, issue 38): the Elector holds
 * its lease through a Keeper, options.keeper or one it builds for each run
 * from its options (buildKeeper); by default that keeper holds through a
 * session, the Client's shared one unless options.session names
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
  #running = false;
  #leading = false;
  #token = 0;
  #leaderHolder = "";
  #leaderToken = 0;
  /** The term checkpoints and transfers act on, until onStartedLeading has returned. */
  #term: Term | undefined;
  /** The current or last term. */
  #lastTerm: Term | undefined;

  /** Returns an Elector for the lease name, calling the service through client. It checks options and does not modify them. */
  constructor(client: Client, name: string, options: ElectorOptions) {
    if (!validName(name)) {
      throw new TypeError(`leasesvc Elector: lease name ${JSON.stringify(name)} must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit`);
    }
    this.#client = client;
    this.#name = name;
    this.#o = resolve(options);
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

  /** performance.now() when the acquire or renew that last succeeded in this (or the last) term was sent (through a session: its last acknowledged heartbeat); 0 before any. */
  get lastSentAt(): number {
    return this.#lastTerm?.sentAt ?? 0;
  }

  /** The safe deadline of the current (or last) term on performance.now(), as its holding keeps it (Holding.deadline); 0 before any. */
  get safeDeadline(): number {
    return this.#lastTerm?.holding.deadline ?? 0;
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
    t.holding.stage(cp);
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
    return await this.#term!.holding.renew(undefined, { signal: opts.signal });
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
    const signal = opts.signal ?? AbortSignal.timeout(this.#o.releaseTimeoutMs);
    const l = await t.holding.transfer(to, opts.reserveMs, cp, { signal });
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
    const k = this.#o.keeper ?? buildKeeper(this.#client, this.#o, this.#name);
    try {
      for (;;) {
        const h = await this.#campaign(k, signal);
        if (h === undefined) return;
        if (await this.#lead(signal, k.clock, h)) return;
      }
    } finally {
      if (k !== this.#o.keeper) await k.close();
      this.#running = false;
    }
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

  /** Acquires the lease through k; resolves to the holding, or to undefined when signal aborts. */
  async #campaign(k: Keeper, signal?: AbortSignal): Promise<Holding | undefined> {
    const o = this.#o;
    let failures = 0;
    // The first acquire, and the first after a failure, does not wait: the
    // answer says at once who leads. The next ones wait on the service.
    let wait = false;
    for (;;) {
      if (signal?.aborted) return undefined;
      const sent = k.clock.now();
      try {
        const waitMs = wait ? Math.max(0, o.waitMs) : 0;
        const ranked = o.priority > 0 || o.preempt;
        const h = await k.hold(this.#name, {
          holder: o.holder,
          metadata: o.metadata,
          waitMs,
          priority: ranked ? o.priority : undefined,
          preempt: o.preempt && waitMs > 0,
          signal,
          aheadMs: (periodMs) => o.cancelBeforeMs + timerSlack(periodMs),
        });
        this.#observe(h.lease);
        return h;
      } catch (err) {
        if (signal?.aborted) return undefined;
        if (err instanceof LeaseHeldError || err instanceof LeaseReservedError) {
          failures = 0;
          this.#observe(err.lease);
          if (o.waitMs > 0 && (!wait || k.clock.now() - sent >= o.waitMs / 10)) {
            wait = true;
            continue; // wait on the service now, or again
          }
          if (!(await clockSleep(k.clock, this.#jittered(o.renewIntervalMs), signal))) return undefined;
          continue;
        }
        if (permanent(err)) throw err;
        if (k.failed !== undefined) throw k.failed; // the keeper can hold nothing more (the session it was given ended)
        if (err instanceof LeaseLostError) continue; // it ran out meanwhile
        wait = false;
        o.logger.warn("leasesvc elector: acquire failed", { lease: this.#name, holder: o.holder, err: String(err) });
        if (!(await clockSleep(k.clock, k.retryDelay(err, failures), signal))) return undefined;
        failures++;
      }
    }
  }

  /**
   * Runs one term of leadership on the holding h: it starts
   * onStartedLeading, lets the term follow the holding's deadline,
   * and decides when to stop leading (a graceful stop, a step-down, a
   * resignation). Resolves to true when run should return (a graceful stop
   * or a resignation), false to campaign again.
   */
  #lead(parent: AbortSignal | undefined, clock: Clock, h: Holding): Promise<boolean> {
    const o = this.#o;
    const l = h.lease;
    const token = h.token;
    const marginMs = o.cancelBeforeMs + timerSlack(h.periodMs);
    if (clock.now() >= h.deadline - marginMs) {
      h.drop(); // too late to lead on this holding
      return Promise.resolve(false);
    }
    return new Promise<boolean>((resolveTerm) => {
      const leading = new AbortController();
      /** Why this leader stops leading while its term could go on. */
      let why: "leading" | "graceful" | "yielded" | "resigned" = "leading";
      let yieldAsked = false;
      const end = (reason: unknown): void => {
        this.#leading = false;
        if (!leading.signal.aborted) leading.abort(reason);
      };
      const t = new Term({
        holding: h,
        clock,
        logger: o.logger,
        marginMs,
        end,
        yieldRequested: (to) => {
          if (why !== "graceful" && !leading.signal.aborted) askYield(to);
        },
        renewed: (_rl, sentAt, deadline) => {
          try {
            o.onRenewed?.({ fencingToken: token, sentAt, deadline });
          } catch (cbErr) {
            o.logger.warn("leasesvc elector: onRenewed failed", { lease: this.#name, holder: o.holder, err: String(cbErr) });
          }
        },
      });
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

