/**
 * An ADK app on two replicas behind one leasesvc: the user sends a second
 * message to a session while the agent is still answering the first (the
 * "double text" of google/adk-python#1049). Each replica has its own Runs
 * (its own session with the service), FirestoreSessionService and Runner,
 * with a custom agent that needs no model.
 *
 *   LEASESVC_URL=http://127.0.0.1:8080 FIRESTORE_EMULATOR_HOST=127.0.0.1:8765 \
 *     node build/examples/app.js [reject|enqueue|interrupt]
 */
import { randomUUID } from "node:crypto";
import { Firestore } from "@google-cloud/firestore";
import { BaseAgent, type Event, type InvocationContext, Runner, createEvent, createEventActions } from "@google/adk";
import { Client, fence } from "@leasesvc/client";
import { FirestoreSessionService, LeasedRunner, Runs, type Strategy } from "@leasesvc/adk";

const url = process.env["LEASESVC_URL"] ?? "http://127.0.0.1:8080";
const strategy = (process.argv[2] ?? "enqueue") as Strategy;
const db = new Firestore({ projectId: process.env["GOOGLE_CLOUD_PROJECT"] ?? "leasesvc-test" });
const verifier = new fence.Verifier(new fence.RemoteKeys(`${url}/.well-known/jwks.json`), "leasesvc");

/** An agent that thinks for half a second, then answers, counting the turns in the session's state. */
class Echo extends BaseAgent {
  readonly #who: string;
  constructor(who: string) {
    super({ name: "echo" });
    this.#who = who;
  }
  protected async *runAsyncImpl(ctx: InvocationContext): AsyncGenerator<Event, void, void> {
    await new Promise((r, j) => {
      const t = setTimeout(r, 500);
      ctx.abortSignal?.addEventListener("abort", () => (clearTimeout(t), j(ctx.abortSignal?.reason)), { once: true });
    });
    const turns = ((ctx.session.state["turns"] as number | undefined) ?? 0) + 1;
    yield createEvent({
      invocationId: ctx.invocationId,
      author: this.name,
      content: { role: "model", parts: [{ text: `${this.#who}: turn ${turns}, ${ctx.session.events.length} events so far` }] },
      actions: createEventActions({ stateDelta: { turns } }),
    });
  }
  protected async *runLiveImpl(ctx: InvocationContext): AsyncGenerator<Event, void, void> {
    yield* this.runAsyncImpl(ctx);
  }
}

function replica(name: string) {
  const runs = new Runs(new Client(url), { holder: name, yieldPollMs: 250 });
  const sessionService = new FirestoreSessionService({ db, verifier, fencing: runs });
  return { runs, sessionService, runner: new LeasedRunner(new Runner({ appName: "example", agent: new Echo(name), sessionService }), runs) };
}

const a = replica("replica-a");
const b = replica("replica-b");
// A Firestore client's first request blocks the event loop a while: make it before holding leases.
await Promise.all([a.sessionService.fence.warm(), b.sessionService.fence.warm()]);
const session = await a.runner.createSession({ userId: "user-1", sessionId: `example-${randomUUID()}` });
const send = async (r: ReturnType<typeof replica>, text: string, delayMs: number) => {
  await new Promise((ok) => setTimeout(ok, delayMs));
  try {
    for await (const ev of r.runner.runAsync({ userId: "user-1", sessionId: session.id, newMessage: { role: "user", parts: [{ text }] }, strategy })) {
      console.log(`${r.runs.holder}: ${ev.content?.parts?.[0]?.text ?? ""}`);
    }
  } catch (err) {
    console.log(`${r.runs.holder}: ${(err as Error).name}: ${(err as Error).message}`);
  }
};
await Promise.all([send(a, "first message", 0), send(b, "second message", 200)]);
const s = await a.runner.runner.sessionService.getSession({ appName: "example", userId: "user-1", sessionId: session.id });
console.log(`history: ${s?.events.map((e) => e.content?.parts?.[0]?.text).join(" | ")}`);
await Promise.all([a.runs.close(), b.runs.close()]);
await db.terminate();
