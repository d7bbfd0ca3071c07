/**
 * Replicas of a LangGraph app against the real leasesvc binary and the
 * Firestore emulator: one run per thread under reject, enqueue and
 * interrupt; a replica frozen past its deadline cannot write a checkpoint
 * and its successor's history is whole; a killed replica hands the thread
 * over within the session window.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Firestore } from "@google-cloud/firestore";
import type { CheckpointTuple } from "@langchain/langgraph-checkpoint";
import { FencedWriteError, RunStoppedError, ThreadBusyError } from "../src/index.js";
import { Child } from "./helpers/child.js";
import { type Service, deferred, newDb, packageDir, scratch, skipReason, startService, waitFor, windowMs } from "./helpers/env.js";
import { type Replica, pause, replica } from "./helpers/graph.js";

const skip = skipReason();
let svc: Service;
let db: Firestore;
const open: Replica[] = [];

function rep(prefix: string, who: string, n: number, step: (i: number, s: AbortSignal | undefined) => Promise<void>, yieldPollMs = 0): Replica {
  const r = replica(svc.url, db, prefix, who, n, step, { yieldPollMs });
  open.push(r);
  return r;
}

/** The checkpoints of thread, each once, and whether they form one chain (no fork, no gap). */
async function history(r: Replica, thread: string): Promise<{ tuples: CheckpointTuple[]; chain: boolean }> {
  const tuples: CheckpointTuple[] = [];
  for await (const t of r.saver.list({ configurable: { thread_id: thread, checkpoint_ns: "" } })) tuples.push(t);
  const ids = new Set(tuples.map((t) => t.checkpoint.id));
  const parents = tuples.map((t) => t.parentConfig?.configurable?.["checkpoint_id"] as string | undefined);
  const roots = parents.filter((p) => p === undefined).length;
  const children = new Set(parents.filter((p) => p !== undefined));
  const chain = roots === 1 && children.size === tuples.length - 1 && [...children].every((p) => ids.has(p!));
  return { tuples, chain };
}

async function logOf(r: Replica, thread: string): Promise<string[]> {
  const t = await r.saver.getTuple({ configurable: { thread_id: thread } });
  return ((t?.checkpoint.channel_values as { log?: string[] } | undefined)?.log ?? []).slice();
}

describe("LangGraph replicas", { skip: skip || false }, () => {
  before(async () => {
    svc = await startService();
    db = newDb();
  });
  after(async () => {
    await Promise.all(open.map((r) => r.close()));
    await svc?.stop();
    await db?.terminate();
  });

  test("reject: two replicas given one thread at once run it once; the other is told who runs it", async () => {
    const prefix = scratch("lg-reject");
    const gate = deferred();
    const a = rep(prefix, "replica-a", 3, () => gate.promise);
    const b = rep(prefix, "replica-b", 3, () => gate.promise);
    const runs = [a, b].map((r) => r.graph.invoke({ log: [] }, { configurable: { thread_id: "t/1" }, strategy: "reject" }));
    const first = await Promise.race(runs.map((p, i) => p.then(() => -1, () => i)));
    assert.ok(first >= 0, "one run is refused before any finishes");
    const refused = await runs[first]!.catch((e: unknown) => e);
    assert.ok(refused instanceof ThreadBusyError, String(refused));
    const winner = first === 0 ? b : a;
    assert.equal(refused.holder, winner.runs.holder);
    assert.equal(refused.reason, "held");
    assert.ok(refused.fencingToken >= 1);
    gate.resolve();
    const out = await runs[1 - first]!;
    assert.deepEqual(out.log, [1, 2, 3].map((i) => `${winner.runs.holder}:${i}`));
    assert.deepEqual(await logOf(a, "t/1"), out.log);
  });

  test("enqueue: two replicas given one thread at once run it twice, in order", async () => {
    const prefix = scratch("lg-enqueue");
    const step = (i: number, s: AbortSignal | undefined) => pause(i === 1 ? 300 : 20, s);
    const a = rep(prefix, "replica-a", 3, step);
    const b = rep(prefix, "replica-b", 3, step);
    await Promise.all([a, b].map((r) => r.graph.invoke({ log: [`start:${r.runs.holder}`] }, { configurable: { thread_id: "t2" }, strategy: "enqueue" })));
    const log = await logOf(a, "t2");
    assert.equal(log.length, 8, log.join(" "));
    const x = log[0]!.slice("start:".length);
    const y = x === "replica-a" ? "replica-b" : "replica-a";
    assert.deepEqual(log, [`start:${x}`, `${x}:1`, `${x}:2`, `${x}:3`, `start:${y}`, `${y}:1`, `${y}:2`, `${y}:3`]);
    assert.ok((await history(a, "t2")).chain, "one chain of checkpoints");
  });

  test("interrupt: the first run stops at its next step and the second starts from its last checkpoint", async (t) => {
    const prefix = scratch("lg-interrupt");
    const inStep3 = deferred();
    const a = rep(prefix, "replica-a", 5, async (i, s) => {
      if (i === 3) {
        inStep3.resolve();
        await pause(60_000, s);
      }
    }, 250);
    const b = rep(prefix, "replica-b", 5, async () => undefined);
    const first = a.graph.invoke({ log: [] }, { configurable: { thread_id: "t3" } }).catch((e: unknown) => e);
    await inStep3.promise;
    const t0 = performance.now();
    const second = await b.graph.invoke(null, { configurable: { thread_id: "t3" }, strategy: "interrupt" });
    const stopped = await first;
    assert.ok(stopped instanceof RunStoppedError, String(stopped));
    assert.equal(stopped.reason, "interrupted");
    assert.equal(stopped.to, "replica-b");
    assert.deepEqual(second.log, ["replica-a:1", "replica-a:2", "replica-b:3", "replica-b:4", "replica-b:5"]);
    assert.ok((await history(b, "t3")).chain, "one chain of checkpoints");
    t.diagnostic(`interrupt to second run done: ${Math.round(performance.now() - t0)} ms (yieldPollMs 250)`);
  });

  test("a write with no holding is refused, naming the reason", async () => {
    const prefix = scratch("lg-none");
    const a = rep(prefix, "replica-a", 1, async () => undefined);
    await assert.rejects(a.saver.fenceFirst("nobody"), (e: unknown) => e instanceof FencedWriteError && e.reason === "no_holding");
  });

  test("a replica frozen past its deadline cannot write a checkpoint; its successor's history is whole", async () => {
    const prefix = scratch("lg-freeze");
    // Transactions of the child: 1 fences first, 2 the input checkpoint, then per step a write and a checkpoint; 7 is step 3's.
    const child = new Child(join(packageDir, "build", "test", "replica.js"), { url: svc.url, prefix, thread: "t4", who: "frozen", steps: 5, stepMs: 50, pauseAtTx: 7 });
    try {
      await child.line("paused");
      child.freeze();
      const b = rep(prefix, "successor", 5, async () => undefined);
      const out = await b.graph.invoke(null, { configurable: { thread_id: "t4" }, strategy: "enqueue" });
      child.thaw();
      child.send("go");
      const refused = await child.line("tx");
      assert.equal(refused["tx"], "refused", JSON.stringify(refused));
      assert.equal(refused["error"], "FencedWriteError", JSON.stringify(refused));
      assert.equal(refused["reason"], "stale", JSON.stringify(refused));
      const k = out.log.findIndex((e) => e.startsWith("successor:"));
      assert.ok(k >= 1, out.log.join(" "));
      assert.ok(out.log.slice(0, k).every((e) => e.startsWith("frozen:")) && out.log.slice(k).every((e) => e.startsWith("successor:")), out.log.join(" "));
      assert.deepEqual(out.log.map((e) => Number(e.split(":")[1])), [1, 2, 3, 4, 5]);
      assert.deepEqual(await logOf(b, "t4"), out.log, "the frozen replica's late write changed nothing");
      assert.ok((await history(b, "t4")).chain, "one chain of checkpoints");
    } finally {
      await child.kill();
    }
  });

  test("a killed replica hands the thread over within the session window", async (t) => {
    const prefix = scratch("lg-kill");
    const child = new Child(join(packageDir, "build", "test", "replica.js"), { url: svc.url, prefix, thread: "t5", who: "killed", steps: 8, stepMs: 200 });
    try {
      await child.line("step", 1);
      let startedAt = 0;
      const b = rep(prefix, "successor", 8, async () => {
        if (startedAt === 0) startedAt = performance.now();
      });
      const second = b.graph.invoke(null, { configurable: { thread_id: "t5" }, strategy: "enqueue" });
      await waitFor("the successor to wait as a candidate", async () => (await b.client.get(b.graph.leaseOf("t5"))).candidates >= 1);
      // Killed in the middle of step 3: between two writes, none of its transactions open (one killed inside a
      // transaction keeps its locks until Firestore expires it: core/fenced.ts, abortedRetryMs).
      await child.line("stepping", 3);
      await pause(50, undefined);
      const killedAt = performance.now();
      await child.kill();
      const out = await second;
      const handover = startedAt - killedAt;
      t.diagnostic(`handover of a killed replica's thread: ${Math.round(handover)} ms (session window ${windowMs} ms)`);
      assert.ok(handover < windowMs + 750, `handover took ${handover} ms`);
      assert.deepEqual(out.log.map((e) => Number(e.split(":")[1])), [1, 2, 3, 4, 5, 6, 7, 8]);
      assert.ok(out.log.slice(0, 2).every((e) => e.startsWith("killed:")), out.log.join(" "));
      assert.ok((await history(b, "t5")).chain, "one chain of checkpoints");
    } finally {
      await child.kill();
    }
  });
});
