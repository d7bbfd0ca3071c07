/** The graphs of the tests: plain function nodes, no model. */
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { Client } from "@leasesvc/client";
import type { Firestore } from "@google-cloud/firestore";
import { FirestoreSaver, LeasedGraph, Runs, type RunsOptions } from "../../src/index.js";
import { verifierOf, windowMs } from "./env.js";

/** The state: a log every node appends one entry to. */
export const State = Annotation.Root({
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

/** What a node does before it appends "{who}:{i}": wait, maybe, observing the run's signal. */
export type Step = (i: number, signal: AbortSignal | undefined) => Promise<void>;

/** A chain of n nodes s1 … sn, each appending "{who}:{i}" after step(i). */
export function chain(n: number, who: string, step: Step, checkpointer: BaseCheckpointSaver) {
  const g = new StateGraph(State);
  for (let i = 1; i <= n; i++) {
    g.addNode(`s${i}`, async (_s: typeof State.State, config: { signal?: AbortSignal }) => {
      await step(i, config.signal);
      return { log: [`${who}:${i}`] };
    });
  }
  const b = g as unknown as { addEdge(a: string, b: string): unknown };
  b.addEdge(START, "s1");
  for (let i = 1; i < n; i++) b.addEdge(`s${i}`, `s${i + 1}`);
  b.addEdge(`s${n}`, END);
  return g.compile({ checkpointer });
}

/** One replica: its own client, Runs (own session), saver and graph. */
export interface Replica {
  client: Client;
  runs: Runs;
  saver: FirestoreSaver;
  graph: LeasedGraph<ReturnType<typeof chain>>;
  close(): Promise<void>;
}

/** A replica named who against the service at url, storing under collectionPrefix. */
export function replica(url: string, db: Firestore, collectionPrefix: string, who: string, n: number, step: Step, opts: RunsOptions = {}): Replica {
  const client = new Client(url);
  const runs = new Runs(client, { holder: who, keeperOptions: { windowMs }, ...opts });
  const saver = new FirestoreSaver({ db, verifier: verifierOf(url), fencing: runs, collectionPrefix, fenceCollection: `${collectionPrefix}-fence` });
  const graph = new LeasedGraph(chain(n, who, step, saver), runs);
  return { client, runs, saver, graph, close: () => runs.close() };
}

/** Resolves after ms, or rejects with the signal's reason when it aborts first. */
export function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
