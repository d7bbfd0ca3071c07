/**
 * The conformance agent (dist/conformance/agent.js) against the real
 * binary, with this test in the driver's role of the cross-language suite:
 * every case, each line asserted field by field.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client } from "@leasesvc/client";
import { Agent } from "./helpers/agent.js";
import { type Service, skipReason, startService, staticAuthEnv } from "./helpers/service.js";

const skip = skipReason();
const freezeRuns = Number(process.env["FREEZE_RUNS"] ?? "5");
let seq = 0;
const leaseName = (kase: string): string => `conf.ts.${kase}.${process.pid}.${++seq}`;

function agentEnv(svc: Service, name: string, token = ""): Record<string, string> {
  return { LEASESVC_URL: svc.url, LEASESVC_TOKEN: token, LEASE_NAME: name, LEASE_HOLDER: "ts-agent", LEASE_TTL_MS: "3000" };
}

describe("conformance agent", { skip: skip || undefined }, () => {
  let svc: Service;
  before(async () => {
    svc = await startService();
  });
  after(async () => {
    await svc?.stop();
  });

  test("basic", async () => {
    const a = new Agent("basic", agentEnv(svc, leaseName("basic")));
    const want = [
      { step: "acquire", holder: "ts-agent", token: 1, held: true },
      { step: "acquire_other", error: "lease_held", holder: "ts-agent" },
      { step: "acquire_again", token: 1 },
      { step: "renew", token: 1 },
      { step: "renew_wrong_token", error: "lease_lost" },
      { step: "release", token: 1, held: false },
      { step: "renew_after_release", error: "lease_lost" },
      { step: "acquire_other", holder: "ts-agent-b", token: 2 },
      { step: "get", holder: "ts-agent-b", token: 2, held: true },
      { step: "get_missing", error: "not_found" },
      { step: "done" },
    ];
    for (const w of want) assert.deepEqual(await a.next(), w);
    assert.equal(await a.exited, 0, a.stderr);
  });

  test("wait", async () => {
    const name = leaseName("wait");
    const c = new Client(svc.url);
    const held = await c.acquire(name, { holder: "driver", ttlMs: 60_000 });
    const a = new Agent("wait", agentEnv(svc, name));
    assert.deepEqual(await a.next(), { step: "waiting" });
    await new Promise((r) => setTimeout(r, 500));
    await c.release(name, "driver", held.fencingToken);
    const got = await a.next();
    assert.equal(got["step"], "acquired");
    assert.equal(got["token"], 2);
    assert.ok(typeof got["waitedMs"] === "number" && got["waitedMs"] >= 400 && got["waitedMs"] < 10_000, JSON.stringify(got));
    assert.deepEqual(await a.next(), { step: "done" });
    assert.equal(await a.exited, 0, a.stderr);
  });

  test(`freeze (${freezeRuns} runs): leading ends before TTL × (1 − drift margin) since the last successful send`, async (t) => {
    const frozen = await startService();
    const measured: number[] = [];
    try {
      for (let i = 0; i < freezeRuns; i++) {
        const a = new Agent("freeze", agentEnv(frozen, leaseName("freeze")));
        try {
          assert.deepEqual(await a.next(), { step: "leading", token: 1 });
          const renewed = await a.next();
          assert.equal(renewed["step"], "renewed");
          assert.equal(typeof renewed["sentMs"], "number");
          frozen.freeze();
          const stopped = await a.next(10_000);
          frozen.thaw();
          assert.equal(stopped["step"], "stopped", JSON.stringify(stopped));
          const x = stopped["sinceLastSentMs"] as number;
          const ttl = stopped["ttlMs"] as number;
          const d = stopped["driftMargin"] as number;
          assert.equal(ttl, 3000);
          assert.equal(d, 0.1);
          assert.ok(x < ttl * (1 - d), `run ${i}: stopped ${x} ms after the last successful send, not before ${ttl * (1 - d)}`);
          measured.push(x);
          a.write("stop");
          assert.equal(await a.exited, 0, a.stderr);
        } finally {
          frozen.thaw();
          a.kill();
        }
      }
    } finally {
      await frozen.stop();
    }
    const sorted = [...measured].sort((x, y) => x - y);
    t.diagnostic(`freeze: sinceLastSentMs min ${sorted[0]} median ${sorted[sorted.length >> 1]} max ${sorted.at(-1)} (bound 2700) over ${measured.length} runs: ${sorted.map((x) => x.toFixed(0)).join(" ")}`);
  });

  test("ratelimit (static auth, 1 request a second)", async () => {
    const auth = await startService({ ...staticAuthEnv(), LEASESVC_RATE_LIMIT: "1", LEASESVC_RATE_BURST: "1" });
    try {
      const name = leaseName("ratelimit");
      const admin = new Client(auth.url, { token: "admin-token-0123456789" });
      await admin.acquire(name, { holder: "driver", ttlMs: 60_000 });
      const a = new Agent("ratelimit", agentEnv(auth, name, "agent-token-0123456789"));
      const got = await a.next();
      assert.equal(got["step"], "done", JSON.stringify(got));
      assert.equal(got["ok"], 3);
      assert.ok((got["elapsedMs"] as number) >= 1500, `waited out Retry-After: ${String(got["elapsedMs"])} ms`);
      assert.equal(await a.exited, 0, a.stderr);
    } finally {
      await auth.stop();
    }
  });

  test("revoke (static auth): leading ends at the next renew, then the agent leads again", async () => {
    const auth = await startService(staticAuthEnv());
    const name = leaseName("revoke");
    const admin = new Client(auth.url, { token: "admin-token-0123456789" });
    const a = new Agent("revoke", agentEnv(auth, name, "agent-token-0123456789"));
    try {
      assert.deepEqual(await a.next(), { step: "leading", token: 1 });
      await admin.revoke(name, { reason: "conformance", fencingToken: 1 });
      const revokedAt = Date.now();
      assert.deepEqual(await a.next(), { step: "stopped", reason: "lease_lost" });
      assert.ok(Date.now() - revokedAt < 1000 + 1000, "within TTL/3 + 1 s of the revoke");
      assert.deepEqual(await a.next(), { step: "leading", token: 2 });
      a.write("stop");
      assert.equal(await a.exited, 0, a.stderr);
    } finally {
      a.kill();
      await auth.stop();
    }
  });
});
