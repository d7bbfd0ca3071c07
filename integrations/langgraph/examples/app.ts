/**
 * A LangGraph.js app on two replicas behind one leasesvc: the user sends a
 * second message to a thread while the first is still being answered (the
 * "double text"). Each replica has its own Runs (its own session with the
 * service) and FirestoreSaver; both are given the thread at once.
 *
 *   LEASESVC_URL=http://127.0.0.1:8080 FIRESTORE_EMULATOR_HOST=127.0.0.1:8765 \
 *     node build/examples/app.js [reject|enqueue|interrupt]
 *
 * reject: one replica answers, the other says who runs the thread; enqueue:
 * both answer, one after the other, the second seeing the first's state;
 * interrupt: the second stops the first at its next step and goes on from
 * its last checkpoint.
 */
import { randomUUID } from "node:crypto";
import { Firestore } from "@google-cloud/firestore";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { Client, fence } from "@leasesvc/client";
import { FirestoreSaver, LeasedGraph, Runs, type Strategy } from "@leasesvc/langgraph";

const url = process.env["LEASESVC_URL"] ?? "http://127.0.0.1:8080";
const strategy = (process.argv[2] ?? "enqueue") as Strategy;
const db = new Firestore({ projectId: process.env["GOOGLE_CLOUD_PROJECT"] ?? "leasesvc-test" });
const verifier = new fence.Verifier(new fence.RemoteKeys(`${url}/.well-known/jwks.json`), "leasesvc");

const State = Annotation.Root({ messages: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });

/** One replica of the app: a graph "think → answer" of plain functions. */
function replica(name: string) {
  const runs = new Runs(new Client(url), { holder: name, yieldPollMs: 250 });
  const saver = new FirestoreSaver({ db, verifier, fencing: runs });
  const graph = new StateGraph(State)
    .addNode("think", async (_s: typeof State.State, config: { signal?: AbortSignal }) => {
      await new Promise((r, j) => {
        const t = setTimeout(r, 500);
        config.signal?.addEventListener("abort", () => (clearTimeout(t), j(config.signal?.reason)), { once: true });
      });
      return { messages: [`${name} thought`] };
    })
    .addNode("answer", async (s: typeof State.State) => ({ messages: [`${name} answered after ${s.messages.length} messages`] }))
    .addEdge(START, "think")
    .addEdge("think", "answer")
    .addEdge("answer", END)
    .compile({ checkpointer: saver });
  return { runs, saver, leased: new LeasedGraph(graph, runs) };
}

const a = replica("replica-a");
const b = replica("replica-b");
const thread = `example-${randomUUID()}`;
// A Firestore client's first request blocks the event loop a while: make it before holding leases.
await Promise.all([a.saver.fence.warm(), b.saver.fence.warm()]);
const send = async (r: ReturnType<typeof replica>, text: string, delayMs: number) => {
  await new Promise((ok) => setTimeout(ok, delayMs));
  try {
    const out = await r.leased.invoke({ messages: [text] }, { configurable: { thread_id: thread }, strategy });
    console.log(`${r.runs.holder}: done: ${out.messages.join(" | ")}`);
  } catch (err) {
    console.log(`${r.runs.holder}: ${(err as Error).name}: ${(err as Error).message}`);
  }
};
await Promise.all([send(a, "first message", 0), send(b, "second message", 200)]);
await Promise.all([a.runs.close(), b.runs.close()]);
await db.terminate();
