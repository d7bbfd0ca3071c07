/**
 * One run per thread across replicas: a run holds the lease that stands for
 * its thread (names.ts) through the SDK's Keeper (a session by default,
 * docs/contract.md §14) from before its first step until after its last
 * write, and a run that finds the thread busy does what its strategy says,
 * with the names LangGraph's platform gives them (docs/contract.md §8 for
 * interrupt):
 *
 * - "reject": fail at once with ThreadBusyError naming the holder;
 * - "enqueue": wait in order (a registered candidate of priority 0, so
 *   waiters on every replica are served by their start of waiting), up to
 *   maxQueued runs of this process per thread and waitTimeoutMs;
 * - "interrupt": preempt: wait as a candidate with a priority above the
 *   holding's and preempt, so the service asks the running holder to yield;
 *   that run's signal aborts with RunStoppedError("interrupted"), it stops
 *   at its next step, its last checkpoint stays, and it releases the lease
 *   once it has settled, before the new run starts.
 *
 * A run's signal also aborts, with RunStoppedError("lost"), when its holding
 * is lost (revoked, taken, its session ended, its deadline passed); Run.check
 * throws from the holder's safe deadline on, so no step or write starts
 * after it. Runs is the Fencing of the stores: it hands them the proof of
 * the current holding of a thread (docs/contract.md §17) and nothing once
 * the holding is lost or past its deadline.
 */
import { randomBytes } from "node:crypto";
import { type Client, type Clock, type Holding, Keeper, type KeeperOptions, LeaseHeldError, LeaseReservedError, defaultHolder } from "@leasesvc/client";
import { FencedWriteError, RunStoppedError, ThreadBusyError } from "./errors.js";

/** What a run does when its thread is busy. */
export type Strategy = "reject" | "enqueue" | "interrupt";

/** The strategies, for checks. */
export const strategies: readonly Strategy[] = ["reject", "enqueue", "interrupt"];

/** What a store asks of whoever runs threads: the proof to write with, and whether the holding still stands. */
export interface Fencing {
  /** The proof of this process's current holding of lease; throws (or rejects with) FencedWriteError ("no_holding", "lost", "deadline_passed", "no_proof") when there is none to write with. */
  proof(lease: string): string | Promise<string>;
  /** Throws FencedWriteError unless the holding of lease with token still stands now (the answer to a write came after its deadline, or it was lost). */
  check(lease: string, token: number): void;
}

/** Defaults of RunsOptions. */
export const runsDefaults = Object.freeze({
  strategy: "reject" as Strategy,
  maxQueued: 16,
  waitTimeoutMs: 300_000,
  yieldPollMs: 0,
  releaseTimeoutMs: 5_000,
});

/** Options of Runs. Every field has a default. */
export interface RunsOptions {
  /** The keeper to hold through (left open by close). Default: a Keeper of its own over the client with keeperOptions (a session, window 1 s). */
  keeper?: Keeper;
  /** Options of the keeper Runs makes when none is given. */
  keeperOptions?: KeeperOptions;
  /** The identity runs hold as. Default "{hostname}-{pid}-{6 random hex}": unique per Runs, so two in one process are two replicas. */
  holder?: string;
  /** The strategy of a run that names none. Default "reject". */
  strategy?: Strategy;
  /** How many runs of this process may wait for one thread (enqueue, interrupt); one more is ThreadBusyError("queue_full"). Default 16. */
  maxQueued?: number;
  /** How long a run waits for its thread (enqueue, interrupt) before ThreadBusyError("timeout"), ms. Default 300,000. */
  waitTimeoutMs?: number;
  /**
   * How often a running holder reads its lease to see whether a run with
   * strategy interrupt asks it to yield, ms; 0 reads never and waits for the
   * service to say so (a session's yield push, a plain renewal's answer).
   * The service sends the push with its next renewal of the session's leases,
   * up to a third of the session lease TTL (10 s) later: poll to interrupt
   * sooner, at one lease read (a billed Firestore read) per running thread
   * per poll. Default 0.
   */
  yieldPollMs?: number;
}

/** Options of one run. */
export interface BeginOptions {
  /** This run's strategy. Default: the Runs'. */
  strategy?: Strategy;
  /** Aborting it while the run waits gives up waiting (rejects with its reason). */
  signal?: AbortSignal;
}

/** A thread's place in this process: the run that holds it, and the runs waiting for it in order. */
interface Gate {
  busy: boolean;
  run: Run | undefined;
  queue: Array<() => void>;
}

/** Runs holds the lease of each thread it runs, one run per thread, as the module's doc says. */
export class Runs implements Fencing {
  /** The identity runs hold as. */
  readonly holder: string;
  /** The keeper holdings are kept by. */
  readonly keeper: Keeper;
  readonly #ownKeeper: boolean;
  readonly #strategy: Strategy;
  readonly #maxQueued: number;
  readonly #waitTimeoutMs: number;
  readonly #yieldPollMs: number;
  readonly #client: Client;
  readonly #gates = new Map<string, Gate>();

  /** Runs calling the service through client. It checks its options and opens nothing until the first run. */
  constructor(client: Client, opts: RunsOptions = {}) {
    this.keeper = opts.keeper ?? new Keeper(client, opts.keeperOptions);
    this.#ownKeeper = opts.keeper === undefined;
    this.holder = opts.holder ?? `${defaultHolder()}-${randomBytes(3).toString("hex")}`;
    this.#strategy = checkStrategy(opts.strategy ?? runsDefaults.strategy);
    this.#maxQueued = opts.maxQueued ?? runsDefaults.maxQueued;
    if (!Number.isInteger(this.#maxQueued) || this.#maxQueued < 0) throw new RangeError(`leasesvc Runs: maxQueued ${this.#maxQueued} must be a whole number ≥ 0`);
    this.#waitTimeoutMs = opts.waitTimeoutMs ?? runsDefaults.waitTimeoutMs;
    if (!(this.#waitTimeoutMs > 0)) throw new RangeError(`leasesvc Runs: waitTimeoutMs ${this.#waitTimeoutMs} must be positive`);
    this.#yieldPollMs = opts.yieldPollMs ?? runsDefaults.yieldPollMs;
    if (!(this.#yieldPollMs >= 0)) throw new RangeError(`leasesvc Runs: yieldPollMs ${this.#yieldPollMs} must be ≥ 0`);
    this.#client = client;
  }

  /** The keeper's clock. */
  get clock(): Clock {
    return this.keeper.clock;
  }

  /** The run of lease this process holds now, if any. */
  current(lease: string): Run | undefined {
    return this.#gates.get(lease)?.run;
  }

  /**
   * Begins a run of lease: resolves once this process holds it, or rejects
   * with ThreadBusyError as the strategy says (or the signal's reason).
   * Call Run.end when the run is over, whatever ended it.
   */
  async begin(lease: string, opts: BeginOptions = {}): Promise<Run> {
    const strategy = checkStrategy(opts.strategy ?? this.#strategy);
    const until = this.clock.now() + this.#waitTimeoutMs;
    let gate = this.#gates.get(lease);
    if (gate === undefined) {
      gate = { busy: false, run: undefined, queue: [] };
      this.#gates.set(lease, gate);
    }
    if (gate.busy) {
      if (strategy === "reject") throw new ThreadBusyError(lease, "held", this.holder, gate.run?.token ?? 0, `this process (holder ${JSON.stringify(this.holder)}) runs it`);
      if (gate.queue.length >= this.#maxQueued) throw new ThreadBusyError(lease, "queue_full", this.holder, gate.run?.token ?? 0, `${gate.queue.length} runs of this process wait for it already (maxQueued)`);
      if (strategy === "interrupt") gate.run?.stop("interrupted", this.holder, "another run of this process interrupts it");
      await this.#turn(lease, gate, until, opts.signal);
    }
    gate.busy = true;
    try {
      const h = await this.#acquire(lease, strategy, until, opts.signal);
      const run = new Run(this, lease, h, () => this.#leave(lease, run));
      gate.run = run;
      if (this.#yieldPollMs > 0) this.#pollYield(run);
      return run;
    } catch (err) {
      this.#leave(lease, undefined);
      throw err;
    }
  }

  /** Runs fn(run) as a run of lease (begin, fn, end). */
  async run<T>(lease: string, fn: (run: Run) => Promise<T>, opts: BeginOptions = {}): Promise<T> {
    const run = await this.begin(lease, opts);
    try {
      return await fn(run);
    } finally {
      await run.end();
    }
  }

  /** Reads run's lease every yieldPollMs while it runs, and stops it when a run asks it to yield. */
  #pollYield(run: Run): void {
    const c = this.clock;
    const tick = (): void => {
      if (run.signal.aborted) return;
      this.#client.get(run.lease, { signal: run.signal }).then(
        (l) => {
          if (l.yieldRequested && l.fencingToken === run.token) run.stop("interrupted", l.yieldTo, `a run of ${JSON.stringify(l.yieldTo)} asks the holder to yield`);
          else if (!run.signal.aborted) c.setTimeout(tick, this.#yieldPollMs);
        },
        () => {
          if (!run.signal.aborted) c.setTimeout(tick, this.#yieldPollMs);
        },
      );
    };
    c.setTimeout(tick, this.#yieldPollMs);
  }

  /** Waits until gate is handed to this caller, or until, or signal. */
  #turn(lease: string, gate: Gate, until: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const c = this.clock;
      const leave = (): void => {
        const i = gate.queue.indexOf(go);
        if (i >= 0) gate.queue.splice(i, 1);
        c.clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
      };
      const go = (): void => {
        leave();
        resolve();
      };
      const onAbort = (): void => {
        leave();
        reject(signal?.reason);
      };
      const timer = c.setTimeout(() => {
        leave();
        reject(new ThreadBusyError(lease, "timeout", this.holder, gate.run?.token ?? 0, `waited ${this.#waitTimeoutMs} ms behind runs of this process`));
      }, until - c.now());
      if (signal?.aborted) {
        onAbort();
        return;
      }
      signal?.addEventListener("abort", onAbort, { once: true });
      gate.queue.push(go);
    });
  }

  /** The run of lease ended (or never began): the next local waiter goes, or the gate closes. */
  #leave(lease: string, run: Run | undefined): void {
    const gate = this.#gates.get(lease);
    if (gate === undefined || (run !== undefined && gate.run !== run)) return;
    gate.run = undefined;
    const next = gate.queue[0];
    if (next !== undefined) {
      next();
      return;
    }
    gate.busy = false;
    this.#gates.delete(lease);
  }

  /** Acquires lease as strategy says, waiting on the service until until. */
  async #acquire(lease: string, strategy: Strategy, until: number, signal: AbortSignal | undefined): Promise<Holding> {
    const k = this.keeper;
    const base = { holder: this.holder, ...(signal !== undefined ? { signal } : {}) };
    if (strategy === "reject") {
      try {
        return await k.hold(lease, { ...base, waitMs: 0 });
      } catch (err) {
        throw busyOf(lease, err, "held") ?? err;
      }
    }
    let priority = 0;
    let preempt = false;
    if (strategy === "interrupt") {
      try {
        return await k.hold(lease, { ...base, waitMs: 0, priority: 0 });
      } catch (err) {
        if (!(err instanceof LeaseHeldError)) throw busyOf(lease, err, "held") ?? err;
        priority = Math.min(1000, err.lease.priority + 1);
        preempt = err.lease.priority < 1000;
      }
    }
    let last: unknown;
    for (;;) {
      const left = Math.floor(until - this.clock.now());
      if (left <= 0) {
        const b = busyOf(lease, last, "timeout");
        throw new ThreadBusyError(lease, "timeout", b?.holder ?? "", b?.fencingToken ?? 0, `waited ${this.#waitTimeoutMs} ms (waitTimeoutMs)`, { cause: last });
      }
      try {
        return await k.hold(lease, { ...base, waitMs: Math.min(left, 60_000), priority, ...(preempt ? { preempt } : {}) });
      } catch (err) {
        if (!(err instanceof LeaseHeldError) && !(err instanceof LeaseReservedError)) throw err;
        last = err;
        if (strategy === "interrupt" && err instanceof LeaseHeldError && err.lease.priority >= priority && priority < 1000) {
          priority = Math.min(1000, err.lease.priority + 1);
          preempt = err.lease.priority < 1000;
        }
      }
    }
  }

  /** proof returns the proof of this process's current holding of lease (Fencing). */
  proof(lease: string): string {
    const run = this.current(lease);
    if (run === undefined) throw new FencedWriteError(lease, "no_holding", `this process (holder ${JSON.stringify(this.holder)}) holds no run of it`);
    return run.fenceProof();
  }

  /** check throws unless the holding of lease with token still stands (Fencing). */
  check(lease: string, token: number): void {
    const run = this.current(lease);
    if (run === undefined || run.token !== token) throw new FencedWriteError(lease, "lost", `the write landed, but the run with token ${token} is over`);
    run.guard("the write landed, but ");
  }

  /** Stops every run (as lost) and closes the keeper if Runs made it; runs after it reject. */
  async close(): Promise<void> {
    for (const g of this.#gates.values()) g.run?.stop("lost", "", "Runs closed");
    if (this.#ownKeeper) await this.keeper.close();
  }
}

/** busyOf maps an acquire's refusal to ThreadBusyError, or undefined for another error. */
function busyOf(lease: string, err: unknown, reason: "held" | "timeout"): ThreadBusyError | undefined {
  if (err instanceof LeaseHeldError) return new ThreadBusyError(lease, reason, err.lease.holder, err.lease.fencingToken, `held by ${JSON.stringify(err.lease.holder)} (fencing token ${err.lease.fencingToken})`, { cause: err });
  if (err instanceof LeaseReservedError) return new ThreadBusyError(lease, reason === "held" ? "reserved" : reason, err.reservedFor, 0, `reserved for ${JSON.stringify(err.reservedFor)}`, { cause: err });
  return undefined;
}

function checkStrategy(s: Strategy): Strategy {
  if (!strategies.includes(s)) throw new RangeError(`leasesvc: strategy ${JSON.stringify(s)} must be one of ${strategies.join(", ")}`);
  return s;
}

/**
 * Run is one run holding its thread's lease: its signal aborts when it must
 * stop (interrupted, lost); check throws from its safe deadline on; end
 * releases the lease.
 */
export class Run {
  /** The lease that stands for the thread. */
  readonly lease: string;
  /** The holding, kept by the Runs' keeper. */
  readonly holding: Holding;
  /** The proof the holding came with (docs/contract.md §17); undefined from a service without proofs. */
  readonly proof: string | undefined;
  readonly #ac = new AbortController();
  readonly #clock: Clock;
  readonly #off: () => void;
  readonly #done: () => void;
  #ended: Promise<void> | undefined;

  constructor(runs: Runs, lease: string, holding: Holding, done: () => void) {
    this.lease = lease;
    this.holding = holding;
    this.proof = holding.lease.proof;
    this.#clock = runs.clock;
    this.#done = done;
    this.#off = holding.onChange((ev) => {
      if (ev.kind === "lost") this.stop("lost", "", String(ev.error.message));
      else if (ev.kind === "moved" && ev.lease.yieldRequested) this.stop("interrupted", ev.lease.yieldTo, `the service asks the holder to yield to ${JSON.stringify(ev.lease.yieldTo)}`);
    });
    if (holding.state !== "held") this.stop("lost", "", `the holding is ${holding.state}`);
    else if (holding.lease.yieldRequested) this.stop("interrupted", holding.lease.yieldTo, "a run waits to interrupt it");
  }

  /** The holding's fencing token. */
  get token(): number {
    return this.holding.token;
  }

  /** The holder the run holds as. */
  get holder(): string {
    return this.holding.holder;
  }

  /** Aborts when the run must stop; its reason is a RunStoppedError. */
  get signal(): AbortSignal {
    return this.#ac.signal;
  }

  /** The holding's safe deadline on the keeper's clock (Holding.deadline). */
  get deadline(): number {
    return this.holding.deadline;
  }

  /** Aborts the run's signal with RunStoppedError(reason) unless it is aborted already. */
  stop(reason: "interrupted" | "lost", to: string, detail: string): void {
    if (!this.#ac.signal.aborted) this.#ac.abort(new RunStoppedError(this.lease, reason, to, detail));
  }

  /** Throws RunStoppedError("lost") when the holding is lost or its safe deadline has passed: call it before every step. */
  check(): void {
    if (this.holding.state !== "held") {
      this.stop("lost", "", `the holding is ${this.holding.state}`);
      throw this.#ac.signal.reason;
    }
    if (this.#clock.now() >= this.holding.deadline) {
      this.stop("lost", "", "the holding's safe deadline passed");
      throw this.#ac.signal.reason;
    }
  }

  /** Throws FencedWriteError ("lost", "deadline_passed") when the holding cannot be written with now; prefix starts its detail. */
  guard(prefix = ""): void {
    if (this.holding.state !== "held") throw new FencedWriteError(this.lease, "lost", `${prefix}the holding is ${this.holding.state}`);
    if (this.#clock.now() >= this.holding.deadline) {
      this.stop("lost", "", "the holding's safe deadline passed");
      throw new FencedWriteError(this.lease, "deadline_passed", `${prefix}the holding's safe deadline passed`);
    }
  }

  /** The proof to write with now (Fencing.proof). */
  fenceProof(): string {
    this.guard();
    if (this.proof === undefined) throw new FencedWriteError(this.lease, "no_proof", "the service gave the holding no proof (proofs off: docs/contract.md §17)");
    return this.proof;
  }

  /** Ends the run: stops it, releases the lease and lets the next run of the thread go. Idempotent; never rejects. */
  end(): Promise<void> {
    this.#ended ??= (async () => {
      this.#off();
      this.stop("lost", "", "the run ended");
      try {
        if (this.holding.releasable) await this.holding.release(undefined, { signal: AbortSignal.timeout(runsDefaults.releaseTimeoutMs) });
      } catch {
        // The holding ends at its session's end or expiry.
      } finally {
        this.#done();
      }
    })();
    return this.#ended;
  }
}
