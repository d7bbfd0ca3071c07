/**
 * LeasedRunner runs an ADK Runner's runAsync for a session only while this
 * process holds the session's lease (Runs): one run per session across
 * every replica, with a strategy for a busy session (reject, enqueue,
 * interrupt), the run's AbortSignal passed to the Runner (which stops after
 * the event in progress when it aborts), and a check of the holding's safe
 * deadline before each next event is asked of the agent. With a
 * FirestoreSessionService every event the Runner appends goes through the
 * session's fence.
 */
import type { Event, Runner } from "@google/adk";
import { FencedWriteError } from "./core/errors.js";
import { leaseName } from "./core/names.js";
import type { Run, Runs, Strategy } from "./core/runs.js";
import { FirestoreSessionService, type SessionKey, defaultSessionPrefix } from "./sessions.js";

/** runAsync's parameters, and the strategy. */
export type LeasedRunParams = Parameters<Runner["runAsync"]>[0] & {
  /** What to do when the session is busy. Default: the Runs'. */
  strategy?: Strategy;
};

/** Options of LeasedRunner. */
export interface LeasedRunnerOptions {
  /** The lease prefix of sessions when the Runner's session service is not a FirestoreSessionService (whose prefix is used otherwise). Default "adk.session". */
  sessionPrefix?: string;
}

/** LeasedRunner wraps runner as the module's doc says. */
export class LeasedRunner {
  readonly runner: Runner;
  readonly runs: Runs;
  readonly #prefix: string;

  constructor(runner: Runner, runs: Runs, opts: LeasedRunnerOptions = {}) {
    this.runner = runner;
    this.runs = runs;
    const svc = runner.sessionService instanceof FirestoreSessionService ? runner.sessionService : undefined;
    this.#prefix = svc?.sessionPrefix ?? opts.sessionPrefix ?? defaultSessionPrefix;
  }

  /** The lease that stands for a session of this runner's app. */
  leaseOf(userId: string, sessionId: string): string {
    return leaseName(this.#prefix, this.runner.appName, userId, sessionId);
  }

  #service(): FirestoreSessionService | undefined {
    const s = this.runner.sessionService;
    return s instanceof FirestoreSessionService ? s : undefined;
  }

  /** Begins a run of the session (warming the store first), fenced first in the store. */
  async #begin(key: SessionKey, strategy: Strategy | undefined, signal: AbortSignal | undefined): Promise<Run> {
    const svc = this.#service();
    if (svc !== undefined) await svc.fence.warm();
    const run = await this.runs.begin(this.leaseOf(key.userId, key.sessionId), { ...(strategy !== undefined ? { strategy } : {}), ...(signal !== undefined ? { signal } : {}) });
    try {
      if (svc !== undefined) await svc.fenceFirst(key);
      run.check();
      return run;
    } catch (err) {
      await run.end();
      throw err;
    }
  }

  /**
   * runner.runAsync(params) while holding the session's lease: yields the
   * Runner's events. Throws ThreadBusyError (reject, or a wait that ran
   * out), the run's RunStoppedError when it was interrupted or its lease was
   * lost, a FencedWriteError of a refused write, or the Runner's error.
   * Breaking out of the loop ends the run.
   */
  async *runAsync(params: LeasedRunParams): AsyncGenerator<Event, void, undefined> {
    const { strategy, ...rest } = params;
    const key = { appName: this.runner.appName, userId: rest.userId, sessionId: rest.sessionId };
    const run = await this.#begin(key, strategy, rest.abortSignal);
    const abortSignal = rest.abortSignal ? AbortSignal.any([run.signal, rest.abortSignal]) : run.signal;
    try {
      const gen = this.runner.runAsync({ ...rest, abortSignal });
      for (;;) {
        run.check();
        const r = await gen.next();
        if (r.done) break;
        yield r.value;
      }
      if (run.signal.aborted) throw run.signal.reason;
    } catch (err) {
      if (err instanceof FencedWriteError || !run.signal.aborted) throw err;
      throw run.signal.reason;
    } finally {
      await this.#service()?.fence.settled(run.lease);
      await run.end();
    }
  }

  /** Runs fn while holding the lease of a session of this runner's app (strategy reject unless given): for writes outside runAsync. */
  async withSession<T>(userId: string, sessionId: string, fn: (run: Run) => Promise<T>, strategy: Strategy = "reject"): Promise<T> {
    const run = await this.#begin({ appName: this.runner.appName, userId, sessionId }, strategy, undefined);
    try {
      return await fn(run);
    } finally {
      await run.end();
    }
  }

  /** Creates a session (its id generated when not given) while holding its lease. */
  async createSession(req: { userId: string; sessionId?: string; state?: Record<string, unknown> }): Promise<ReturnType<Runner["sessionService"]["createSession"]> extends Promise<infer S> ? S : never> {
    const sessionId = req.sessionId || crypto.randomUUID();
    return this.withSession(req.userId, sessionId, () => this.runner.sessionService.createSession({ appName: this.runner.appName, userId: req.userId, sessionId, ...(req.state ? { state: req.state } : {}) }));
  }

  /** Deletes a session while holding its lease. */
  async deleteSession(userId: string, sessionId: string): Promise<void> {
    await this.withSession(userId, sessionId, () => this.runner.sessionService.deleteSession({ appName: this.runner.appName, userId, sessionId }));
  }
}
