/**
 * Replicas of an ADK app against the real leasesvc binary and the Firestore
 * emulator: one run per session under reject, enqueue and interrupt; a
 * replica frozen past its deadline cannot append an event and its
 * successor's history is whole; a killed replica hands the session over
 * within the session window.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { Firestore } from "@google-cloud/firestore";
import { FencedWriteError, RunStoppedError, ThreadBusyError } from "../src/index.js";
import { type Replica, appName, pause, replica, send, texts } from "./helpers/agent.js";
import { Child } from "./helpers/child.js";
import { type Service, deferred, newDb, packageDir, scratch, skipReason, startService, waitFor, windowMs } from "./helpers/env.js";

const skip = skipReason();
let svc: Service;
let db: Firestore;
const open: Replica[] = [];

function rep(prefix: string, who: string, n: number, step: (i: number, s: AbortSignal | undefined) => Promise<void>, yieldPollMs = 0): Replica {
  const r = replica(svc.url, db, prefix, who, n, step, { yieldPollMs });
  open.push(r);
  return r;
}

/** The step numbers of a history's agent events (its user messages left out). */
const steps = (h: string[]): number[] => h.filter((t) => !t.startsWith("hello")).map((t) => Number(t.split(":")[1]));

describe("ADK replicas", { skip: skip || false }, () => {
  before(async () => {
    svc = await startService();
    db = newDb();
  });
  after(async () => {
    await Promise.all(open.map((r) => r.close()));
    await svc?.stop();
    await db?.terminate();
  });

  test("reject: two replicas given one session at once run it once; the other is told who runs it", async () => {
    const prefix = scratch("adk-reject");
    const gate = deferred();
    const a = rep(prefix, "replica-a", 3, () => gate.promise);
    const b = rep(prefix, "replica-b", 3, () => gate.promise);
    await a.runner.createSession({ userId: "u", sessionId: "s/1" });
    const runs = [a, b].map((r) => send(r, "u", "s/1", `hello from ${r.runs.holder}`, "reject"));
    const first = await Promise.race(runs.map((p, i) => p.then(() => -1, () => i)));
    assert.ok(first >= 0, "one run is refused before any finishes");
    const refused = await runs[first]!.catch((e: unknown) => e);
    assert.ok(refused instanceof ThreadBusyError, String(refused));
    const winner = first === 0 ? b : a;
    assert.equal(refused.holder, winner.runs.holder);
    gate.resolve();
    const out = await runs[1 - first]!;
    assert.deepEqual(out, [1, 2, 3].map((i) => `${winner.runs.holder}:${i}`));
    assert.deepEqual(await texts(a, "u", "s/1"), [`hello from ${winner.runs.holder}`, ...out]);
  });

  test("enqueue: two replicas given one session at once run it twice, in order", async () => {
    const prefix = scratch("adk-enqueue");
    const step = (i: number, s: AbortSignal | undefined) => pause(i === 1 ? 300 : 20, s);
    const a = rep(prefix, "replica-a", 6, step);
    const b = rep(prefix, "replica-b", 6, step);
    await a.runner.createSession({ userId: "u", sessionId: "s2" });
    // The first run takes the agent to count 6; the second, in order after it, finds nothing left to do.
    await Promise.all([a, b].map((r) => send(r, "u", "s2", `hello from ${r.runs.holder}`, "enqueue")));
    const h = await texts(a, "u", "s2");
    const x = h[0]!.slice("hello from ".length);
    const y = x === "replica-a" ? "replica-b" : "replica-a";
    assert.deepEqual(h, [`hello from ${x}`, `${x}:1`, `${x}:2`, `${x}:3`, `${x}:4`, `${x}:5`, `${x}:6`, `hello from ${y}`]);
  });

  test("interrupt: the first run stops at its next step and the second starts from its last event", async () => {
    const prefix = scratch("adk-interrupt");
    const inStep3 = deferred();
    const a = rep(
      prefix,
      "replica-a",
      5,
      async (i, s) => {
        if (i === 3) {
          inStep3.resolve();
          await pause(60_000, s);
        }
      },
      250,
    );
    const b = rep(prefix, "replica-b", 5, async () => undefined);
    await a.runner.createSession({ userId: "u", sessionId: "s3" });
    const first = send(a, "u", "s3", "hello from a").catch((e: unknown) => e);
    await inStep3.promise;
    const second = await send(b, "u", "s3", "hello from b", "interrupt");
    const stopped = await first;
    assert.ok(stopped instanceof RunStoppedError, String(stopped));
    assert.equal(stopped.reason, "interrupted");
    assert.deepEqual(second, ["replica-b:3", "replica-b:4", "replica-b:5"]);
    assert.deepEqual(await texts(b, "u", "s3"), ["hello from a", "replica-a:1", "replica-a:2", "hello from b", "replica-b:3", "replica-b:4", "replica-b:5"]);
    const sess = await b.service.getSession({ appName, userId: "u", sessionId: "s3" });
    assert.equal(sess?.state["count"], 5);
    assert.equal(sess?.state["app:last"], "replica-b");
    assert.equal(sess?.state["temp:scratch"], undefined);
  });

  test("a write with no holding is refused, naming the reason", async () => {
    const prefix = scratch("adk-none");
    const a = rep(prefix, "replica-a", 1, async () => undefined);
    await assert.rejects(a.service.createSession({ appName, userId: "u", sessionId: "x" }), (e: unknown) => e instanceof FencedWriteError && e.reason === "no_holding");
  });

  test("a replica frozen past its deadline cannot append an event; its successor's history is whole", async () => {
    const prefix = scratch("adk-freeze");
    const b = rep(prefix, "successor", 5, async () => undefined);
    await b.runner.createSession({ userId: "u", sessionId: "s4" });
    // Transactions of the child: 1 fences first, 2 appends the message, then one per step; 5 is step 3's.
    const child = new Child(join(packageDir, "build", "test", "replica.js"), { url: svc.url, prefix, session: "s4", who: "frozen", steps: 5, stepMs: 50, pauseAtTx: 5 });
    try {
      await child.line("paused");
      child.freeze();
      const out = await send(b, "u", "s4", "hello from successor", "enqueue");
      child.thaw();
      child.send("go");
      const refused = await child.line("tx");
      assert.equal(refused["tx"], "refused", JSON.stringify(refused));
      assert.equal(refused["error"], "FencedWriteError", JSON.stringify(refused));
      assert.equal(refused["reason"], "stale", JSON.stringify(refused));
      assert.deepEqual(out, ["successor:3", "successor:4", "successor:5"]);
      assert.deepEqual(await texts(b, "u", "s4"), ["hello from frozen", "frozen:1", "frozen:2", "hello from successor", "successor:3", "successor:4", "successor:5"]);
    } finally {
      await child.kill();
    }
  });

  test("a killed replica hands the session over within the session window", async (t) => {
    const prefix = scratch("adk-kill");
    let startedAt = 0;
    const b = rep(prefix, "successor", 8, async () => {
      if (startedAt === 0) startedAt = performance.now();
    });
    await b.runner.createSession({ userId: "u", sessionId: "s5" });
    const child = new Child(join(packageDir, "build", "test", "replica.js"), { url: svc.url, prefix, session: "s5", who: "killed", steps: 8, stepMs: 200 });
    try {
      await child.line("step", 1);
      const second = send(b, "u", "s5", "hello from successor", "enqueue");
      await waitFor("the successor to wait as a candidate", async () => (await b.client.get(b.runner.leaseOf("u", "s5"))).candidates >= 1);
      // Killed in the middle of step 3: between two writes, none of its transactions open (one killed inside a
      // transaction keeps its locks until Firestore expires it: core/fenced.ts, abortedRetryMs).
      await child.line("stepping", 3);
      await pause(50, undefined);
      const killedAt = performance.now();
      await child.kill();
      await second;
      const handover = startedAt - killedAt;
      t.diagnostic(`handover of a killed replica's session: ${Math.round(handover)} ms (session window ${windowMs} ms)`);
      assert.ok(handover < windowMs + 750, `handover took ${handover} ms`);
      const h = await texts(b, "u", "s5");
      assert.deepEqual(steps(h), [1, 2, 3, 4, 5, 6, 7, 8], h.join(" "));
      assert.equal(h.filter((x) => x.startsWith("hello")).length, 2, h.join(" "));
    } finally {
      await child.kill();
    }
  });
});
