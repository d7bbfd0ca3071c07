/** The ADK app of the tests: a custom agent of plain steps, no model. */
import type { Firestore } from "@google-cloud/firestore";
import { BaseAgent, type Event, type InvocationContext, Runner, createEvent, createEventActions } from "@google/adk";
import { Client } from "@leasesvc/client";
import { FirestoreSessionService, LeasedRunner, Runs, type RunsOptions } from "../../src/index.js";
import { verifierOf, windowMs } from "./env.js";

/** What a step does before its event: wait, maybe, observing the run's signal. */
export type Step = (i: number, signal: AbortSignal | undefined) => Promise<void>;

/**
 * Steps continues from the session's state: steps count+1 … n, each an
 * event "{who}:{i}" whose state delta sets count (and app:last, user:last).
 */
export class Steps extends BaseAgent {
  readonly #n: number;
  readonly #who: string;
  readonly #step: Step;
  constructor(n: number, who: string, step: Step) {
    super({ name: "steps" });
    this.#n = n;
    this.#who = who;
    this.#step = step;
  }
  protected async *runAsyncImpl(ctx: InvocationContext): AsyncGenerator<Event, void, void> {
    const from = ((ctx.session.state["count"] as number | undefined) ?? 0) + 1;
    for (let i = from; i <= this.#n; i++) {
      await this.#step(i, ctx.abortSignal);
      yield createEvent({
        invocationId: ctx.invocationId,
        author: this.name,
        content: { role: "model", parts: [{ text: `${this.#who}:${i}` }] },
        actions: createEventActions({ stateDelta: { count: i, "app:last": this.#who, "user:last": i, "temp:scratch": i } }),
      });
    }
  }
  protected async *runLiveImpl(ctx: InvocationContext): AsyncGenerator<Event, void, void> {
    yield* this.runAsyncImpl(ctx);
  }
}

/** One replica: its own client, Runs (own session), session service and runner. */
export interface Replica {
  client: Client;
  runs: Runs;
  service: FirestoreSessionService;
  runner: LeasedRunner;
  close(): Promise<void>;
}

/** The app's name in the tests. */
export const appName = "app";

/** A replica named who against the service at url, storing under collectionPrefix. */
export function replica(url: string, db: Firestore, collectionPrefix: string, who: string, n: number, step: Step, opts: RunsOptions = {}): Replica {
  const client = new Client(url);
  const runs = new Runs(client, { holder: who, keeperOptions: { windowMs }, ...opts });
  const service = new FirestoreSessionService({ db, verifier: verifierOf(url), fencing: runs, collectionPrefix, fenceCollection: `${collectionPrefix}-fence` });
  const runner = new LeasedRunner(new Runner({ appName, agent: new Steps(n, who, step), sessionService: service }), runs);
  return { client, runs, service, runner, close: () => runs.close() };
}

/** Runs a message through r for session s of user u, collecting the texts of the events. */
export async function send(r: Replica, u: string, s: string, text: string, strategy?: "reject" | "enqueue" | "interrupt"): Promise<string[]> {
  const out: string[] = [];
  for await (const ev of r.runner.runAsync({ userId: u, sessionId: s, newMessage: { role: "user", parts: [{ text }] }, ...(strategy ? { strategy } : {}) })) {
    out.push(ev.content?.parts?.[0]?.text ?? "");
  }
  return out;
}

/** The texts of a session's events, in order. */
export async function texts(r: Replica, u: string, s: string): Promise<string[]> {
  const sess = await r.service.getSession({ appName, userId: u, sessionId: s });
  return (sess?.events ?? []).map((e) => e.content?.parts?.[0]?.text ?? "");
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
