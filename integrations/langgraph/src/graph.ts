/**
 * LeasedGraph runs a compiled LangGraph graph's invoke and stream for a
 * thread only while this process holds the thread's lease (Runs): one run
 * per thread across every replica, with a strategy for a busy thread
 * (reject, enqueue, interrupt), the run's AbortSignal passed to the graph so
 * it stops at its next step when it is interrupted or its lease is lost,
 * and checkpoints written before each next step (durability "sync" unless
 * the call says otherwise), each through the FirestoreSaver's fence.
 */
import { FencedWriteError } from "./core/errors.js";
import { leaseName } from "./core/names.js";
import type { Run, Runs, Strategy } from "./core/runs.js";
import { FirestoreSaver, defaultThreadPrefix } from "./saver.js";

/** What LeasedGraph needs of a graph: a compiled StateGraph or any Pregel. */
export interface GraphLike {
  invoke(input: never, options?: never): Promise<unknown>;
  stream(input: never, options?: never): Promise<AsyncIterable<unknown>>;
  checkpointer?: unknown;
}

/** A run's options: the graph's own, with configurable.thread_id required, and the strategy. */
export type LeasedConfig<C> = NonNullable<C> & {
  /** What to do when the thread is busy. Default: the Runs'. */
  strategy?: Strategy;
};

type Opts = { configurable?: Record<string, unknown>; signal?: AbortSignal; durability?: string; strategy?: Strategy };

/** Options of LeasedGraph. */
export interface LeasedGraphOptions {
  /** The lease prefix of threads when the graph's checkpointer is not a FirestoreSaver (whose prefix is used otherwise). Default "langgraph.thread". */
  threadPrefix?: string;
}

/** LeasedGraph wraps graph as the module's doc says. */
export class LeasedGraph<G extends GraphLike> {
  readonly graph: G;
  readonly runs: Runs;
  readonly #prefix: string;

  constructor(graph: G, runs: Runs, opts: LeasedGraphOptions = {}) {
    this.graph = graph;
    this.runs = runs;
    const saver = graph.checkpointer instanceof FirestoreSaver ? graph.checkpointer : undefined;
    this.#prefix = saver?.threadPrefix ?? opts.threadPrefix ?? defaultThreadPrefix;
  }

  /** The lease that stands for thread threadId. */
  leaseOf(threadId: string): string {
    return leaseName(this.#prefix, threadId);
  }

  /** Begins a run of the thread config names, claims it in the saver, and returns the run and the graph's options. */
  /** Waits for the run's writes in flight (the graph does not when its signal aborts), then ends it. */
  async #end(run: Run): Promise<void> {
    const saver = this.graph.checkpointer;
    if (saver instanceof FirestoreSaver) await saver.fence.settled(run.lease);
    await run.end();
  }

  async #begin(config: Opts): Promise<{ run: Run; threadId: string; options: Opts }> {
    const threadId = config.configurable?.["thread_id"];
    if (typeof threadId !== "string" || threadId === "") throw new TypeError("leasesvc LeasedGraph: configurable.thread_id must name the thread (a non-empty string)");
    const { strategy, ...rest } = config;
    const saver = this.graph.checkpointer;
    if (saver instanceof FirestoreSaver) await saver.fence.warm();
    const run = await this.runs.begin(this.leaseOf(threadId), { ...(strategy !== undefined ? { strategy } : {}), ...(config.signal ? { signal: config.signal } : {}) });
    try {
      if (saver instanceof FirestoreSaver) await saver.fenceFirst(threadId);
      run.check();
    } catch (err) {
      await run.end();
      throw err;
    }
    const signal = config.signal ? AbortSignal.any([run.signal, config.signal]) : run.signal;
    return { run, threadId, options: { ...rest, signal, durability: rest.durability ?? "sync" } };
  }

  /**
   * graph.invoke(input, config) while holding the thread's lease; rejects
   * with ThreadBusyError (reject, or a wait that ran out), with the run's
   * RunStoppedError when it was interrupted or its lease was lost, or with
   * the graph's error.
   */
  async invoke(input: Parameters<G["invoke"]>[0], config: LeasedConfig<Parameters<G["invoke"]>[1]>): Promise<Awaited<ReturnType<G["invoke"]>>> {
    const { run, options } = await this.#begin(config as Opts);
    try {
      return (await (this.graph.invoke as (i: unknown, o: unknown) => Promise<unknown>)(input, options)) as Awaited<ReturnType<G["invoke"]>>;
    } catch (err) {
      throw stopped(run, err);
    } finally {
      await this.#end(run);
    }
  }

  /**
   * graph.stream(input, config) while holding the thread's lease: yields
   * the graph's chunks, and throws as invoke does. Breaking out of the loop
   * ends the run.
   */
  async *stream(input: Parameters<G["stream"]>[0], config: LeasedConfig<Parameters<G["stream"]>[1]>): AsyncGenerator<StreamChunk<G>, void, undefined> {
    const { run, options } = await this.#begin(config as Opts);
    try {
      const s = await (this.graph.stream as (i: unknown, o: unknown) => Promise<AsyncIterable<unknown>>)(input, options);
      for await (const chunk of s) {
        run.check();
        yield chunk as StreamChunk<G>;
      }
    } catch (err) {
      throw stopped(run, err);
    } finally {
      await this.#end(run);
    }
  }
}

/** The chunks graph.stream yields. */
export type StreamChunk<G extends GraphLike> = Awaited<ReturnType<G["stream"]>> extends AsyncIterable<infer C> ? C : unknown;

/** The error a run ends with: the run's stop reason when its signal aborted (the graph's own abort error says less), else err. */
function stopped(run: Run, err: unknown): unknown {
  if (err instanceof FencedWriteError) return err;
  if (run.signal.aborted) return run.signal.reason;
  return err;
}
