import type { Client } from "./client.js";
import { clockSleep } from "./clock.js";
import { cancelBeforeFor, stopTime } from "./deadline.js";
import { LeaseHeldError, LeaseLostError, LeaseReservedError } from "./errors.js";
import { checkCheckpoint } from "./holding.js";
import type { Holding } from "./holding.js";
import { Keeper, type KeeperOptions } from "./keeper.js";
import { type Lease, validName } from "./lease.js";
import {
  type ElectorOptions,
  type LegacyElectorOptions,
  NotLeadingError,
  type Resolved,
  TransferredError,
  YieldedError,
  keeperOptionsFor,
  resolve,
  splitLegacy,
} from "./electoropts.js";
import { Term, permanent } from "./term.js";

export { defaultHolder } from "./keeper.js";
export { maxCheckpointBytes } from "./holding.js";
export { NotLeadingError, TransferredError, YieldedError, electorDefaults, maxPriority } from "./electoropts.js";
export type { ElectorCallbacks, ElectorLogger, ElectorOptions, LegacyElectorOptions, RenewInfo, TermInfo } from "./electoropts.js";

/** A keeper an Elector builds for each run (Elector.forClient, the deprecated Client form) and closes when the run ends. */
class KeeperPerRun {
  constructor(readonly make: () => Keeper) {}
}

/**
 * Elector campaigns for one lease and keeps it while this process leads,
 * like the Go SDK's client.Elector. It is built on a Keeper (issue 46):
 * the keeper decides how the lease is kept (a session or plain renewals,
 * its TTL, renewals, retries, drift margin and clock) and the Elector only
 * what a term is: `new Elector(keeper, name, options)`, or
 * `Elector.forClient(client, name, options, keeperOptions?)`, which builds
 * a keeper for each run and closes it when the run ends.
 *
 * run() campaigns until its signal is aborted: it acquires the lease
 * through the keeper (keeper.hold), waiting on the service (waitMs) while
 * another holds it; once leader it calls callbacks.onStartedLeading(signal,
 * token) and ends the term — aborting the leading signal — at once when
 * the holding is lost (a renewal answered lease_lost, a lost or revoked
 * push, the session ended), and at the term's stop time, stopTime(the
 * holding's deadline, cancelBeforeMs), when confirmations stop for any
 * reason (timeouts, 5xx, an unreachable service, a paused process). After a
 * lost term it campaigns again, through a new session when the service
 * ended the keeper's (rule L2). When run's signal is aborted it aborts the
 * leading signal, keeps the holding until onStartedLeading has returned,
 * releases the lease so a follower takes over at once, calls
 * onStoppedLeading and resolves.
 *
 * Guarantees and limits: the deadline is the holding's (Holding.deadline:
 * deadlineOf(the send time of its last confirmation, the span, driftMargin),
 * on the keeper's clock; the span is the plain TTL or the session's
 * window); the service decided the holding's expiry after that send, so no
 * other holder can start before it, provided the clocks run at rates within
 * driftMargin of each other. cancelBeforeMs (default min(250 ms, span/10))
 * must fit the span (cancelBeforeFits); a timer that fires late eats into
 * it. Local time and server times are never compared. A process that is
 * paused, or whose event loop is blocked, can still act after its
 * deadline: that is why every write downstream must carry the fencing
 * token, and downstream systems must refuse tokens lower than the highest
 * they have seen.
 */
export class Elector {
  readonly #name: string;
  readonly #o: Resolved;
  #keeper: Keeper;
  /** Builds the keeper of each run after the first (Elector.forClient); undefined for a keeper given. */
  readonly #make: (() => Keeper) | undefined;
  #fresh = true;
  #running = false;
  #leading = false;
  #token = 0;
  #leaderHolder = "";
  #leaderToken = 0;
  /** The term checkpoints and transfers act on, until onStartedLeading has returned. */
  #term: Term | undefined;
  /** The current or last term. */
  #lastTerm: Term | undefined;

  /**
   * Returns an Elector for the lease name that holds it through keeper,
   * which stays open when the Elector stops. It checks the options (and
   * does not modify them): a cancelBeforeMs that does not fit the keeper's
   * span, when that is known already (plain renewals or a session given),
   * throws InvalidArgumentError here; otherwise run checks it.
   */
  constructor(keeper: Keeper, name: string, options: ElectorOptions);
  /**
   * @deprecated Use Elector.forClient(client, name, options, keeperOptions)
   * or new Elector(keeper, name, options): this form builds a Keeper for
   * each run from the keeper fields of options (LegacyElectorOptions).
   */
  constructor(client: Client, name: string, options: LegacyElectorOptions);
  constructor(via: Keeper | Client | KeeperPerRun, name: string, options: ElectorOptions | LegacyElectorOptions) {
    if (!validName(name)) {
      throw new TypeError(`leasesvc Elector: lease name ${JSON.stringify(name)} must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit`);
    }
    this.#name = name;
    if (via instanceof Keeper) {
      this.#o = resolve(options as ElectorOptions);
      this.#keeper = via;
      this.#make = undefined;
    } else if (via instanceof KeeperPerRun) {
      this.#o = resolve(options as ElectorOptions);
      this.#make = via.make;
      this.#keeper = via.make();
    } else {
      const legacy = options as LegacyElectorOptions;
      if (typeof legacy?.onStartedLeading !== "function") throw new TypeError("leasesvc Elector: options.onStartedLeading is required");
      const { elector, keeper } = splitLegacy(legacy);
      this.#o = resolve(elector);
      if (keeper instanceof Keeper) {
        this.#keeper = keeper;
        this.#make = undefined;
      } else {
        const ko = keeperOptionsFor(name, this.#o.givenLogger, keeper);
        this.#make = () => new Keeper(via, ko);
        this.#keeper = this.#make();
      }
    }
    this.#cancelBeforeFor(this.#keeper); // L3: refused now when the span is known
  }

  /**
   * forClient returns an Elector for the lease name that holds it through
   * a Keeper of its own over client, built from keeperOptions for each run
   * and closed when the run ends (a session by default; the Elector's
   * logger is the keeper's unless keeperOptions names one).
   */
  static forClient(client: Client, name: string, options: ElectorOptions, keeperOptions: KeeperOptions = {}): Elector {
    const logger = (options as Partial<ElectorOptions> | undefined)?.logger;
    const ko = keeperOptionsFor(name, logger, keeperOptions);
    return new Elector(new KeeperPerRun(() => new Keeper(client, ko)) as unknown as Keeper, name, options);
  }

  /** The keeper the Elector holds through (for one it builds: the current or last run's). */
  get keeper(): Keeper {
    return this.#keeper;
  }

  /**
   * The CancelBefore of its terms, ms: the one given, checked against the
   * keeper's span, or the default for it (min(250, span / 10)); undefined
   * while neither is known (before run chose the keeper's mode).
   */
  get cancelBeforeMs(): number | undefined {
    return this.#keeper.span === undefined ? this.#o.cancelBeforeMs : this.#cancelBeforeFor(this.#keeper);
  }

  /** The CancelBefore for k's span (rule L3: InvalidArgumentError when a given one does not fit); undefined while the span is unknown. */
  #cancelBeforeFor(k: Keeper): number | undefined {
    const span = k.span;
    if (span === undefined) return undefined;
    return cancelBeforeFor(this.#o.cancelBeforeMs, span.spanMs, span.driftMargin, span.name);
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

  /** The keeper's clock time when the confirmation the current (or last) term's deadline counts from was sent (an acquire, a renewal, an acknowledged heartbeat); 0 before any. */
  get lastSentAt(): number {
    return this.#lastTerm?.sentAt ?? 0;
  }

  /** The deadline of the current (or last) term's holding on the keeper's clock (Holding.deadline); 0 before any. */
  get safeDeadline(): number {
    return this.#lastTerm?.holding.deadline ?? 0;
  }

  /** @deprecated The keeper's values (keeper.ttlMs, …) and this Elector's waitMs and cancelBeforeMs. */
  get options(): Readonly<{ ttlMs: number; renewIntervalMs: number; driftMargin: number; renewJitter: number; waitMs: number; cancelBeforeMs: number | undefined }> {
    const k = this.#keeper;
    return { ttlMs: k.ttlMs, renewIntervalMs: k.renewIntervalMs, driftMargin: k.driftMargin, renewJitter: k.renewJitter, waitMs: this.#o.waitMs, cancelBeforeMs: this.cancelBeforeMs };
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
    const signal = opts.signal ?? AbortSignal.timeout(this.#keeper.releaseTimeoutMs);
    const l = await t.holding.transfer(to, opts.reserveMs, cp, { signal });
    t.transferred(to, new TransferredError(to));
    return l;
  }

  /**
   * Campaigns and leads until signal is aborted, as the class's doc says,
   * then resolves. It first has the keeper choose its mode (keeper.start)
   * and checks cancelBeforeMs against its span. It rejects at once when
   * cancelBeforeMs does not fit that span (InvalidArgumentError), when the
   * service refuses the Elector's requests for good (InvalidArgumentError,
   * DeniedError: a TTL out of the service's bounds, credentials refused),
   * when the keeper can hold nothing more (closed, or the session given to
   * it ended) and when run is already running. A token provider that fails
   * is retried like an unreachable service.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.#running) throw new Error("leasesvc Elector.run: already running");
    this.#running = true;
    const k = this.#runKeeper();
    try {
      try {
        await k.start(signal);
      } catch (err) {
        if (signal?.aborted) return;
        throw err;
      }
      const cb = this.#cancelBeforeFor(k)!;
      for (;;) {
        const h = await this.#campaign(k, cb, signal);
        if (h === undefined) return;
        if (await this.#lead(signal, k, h, cb)) return;
      }
    } finally {
      if (this.#make !== undefined) await k.close();
      this.#running = false;
    }
  }

  /** The keeper of this run: the one given, or a new one for every run after the first. */
  #runKeeper(): Keeper {
    if (this.#make !== undefined && !this.#fresh) this.#keeper = this.#make();
    this.#fresh = false;
    return this.#keeper;
  }

  #observe(l: Lease): void {
    if (!l.held) return;
    const changed = l.holder !== this.#leaderHolder;
    this.#leaderHolder = l.holder;
    this.#leaderToken = l.fencingToken;
    if (changed) this.#o.onNewLeader?.(l.holder);
  }

  /** Acquires the lease through k; resolves to the holding, or to undefined when signal aborts. */
  async #campaign(k: Keeper, cancelBeforeMs: number, signal?: AbortSignal): Promise<Holding | undefined> {
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
          aheadMs: cancelBeforeMs,
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
          if (!(await clockSleep(k.clock, k.pollDelay(), signal))) return undefined;
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
  #lead(parent: AbortSignal | undefined, k: Keeper, h: Holding, cancelBeforeMs: number): Promise<boolean> {
    const o = this.#o;
    const clock = k.clock;
    const l = h.lease;
    const token = h.token;
    if (clock.now() >= stopTime(h.deadline, cancelBeforeMs)) {
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
        cancelBeforeMs,
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

