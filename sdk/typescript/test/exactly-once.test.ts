/** The exactly-once example against the real binary, and its sink fenced with proofs on its own. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fence } from "@leasesvc/client";
import { FencingSink, forgeries } from "../examples/exactly-once.js";
import { claims, newKey, sign, staticKeys } from "./helpers/proofs.js";
import { packageDir, skipReason, startService } from "./helpers/service.js";

describe("exactly-once example", () => {
  test("the fencing sink admits the service's proofs only, refusing stale, forged and bare tokens", async () => {
    const k = await newKey();
    const s = new FencingSink(3, "work", new fence.Guard(new fence.Verifier(staticKeys(k), "leasesvc")));
    const p1 = await sign(k, claims("work", 1, { holder: "a" }));
    const p2 = await sign(k, claims("work", 2, { holder: "b" }));
    assert.deepEqual(await s.claim(p1, 2), [0, 1]);
    assert.equal(await s.complete(0, p1), true);
    assert.deepEqual(await s.claim(p2, 5), [1, 2], "a newer leader claims the tasks not done");
    assert.equal(s.leader, "b");
    assert.equal(await s.complete(1, p1), false, "the old leader's write is refused");
    assert.equal(await s.claim(p1), undefined, "and so is its claim");
    assert.equal(s.staleRejected, 2);
    for (const forged of [...forgeries("work", 1002), await sign(k, claims("other", 1002))]) {
      assert.equal(await s.complete(2, forged), false, `forged ${forged.slice(0, 30)} admitted`);
    }
    assert.deepEqual(s.forged, ["malformed", "unknown_key", "other_lease"]);
    assert.equal(s.highest, 2, "the forgeries changed nothing");
    assert.equal(await s.complete(1, p2), true, "the true leader goes on");
    assert.equal(await s.complete(1, p2), true);
    assert.equal(s.duplicates, 1, "a task completed twice is counted");
    assert.equal(s.staleAccepted, 0);
  });

  test("5 agents, 1,000 tasks, the leader killed twice, two forgeries: 0 duplicates, 0 stale or forged writes accepted", { skip: skipReason() || undefined }, async (t) => {
    const svc = await startService();
    try {
      const out = await new Promise<string>((resolve, reject) => {
        execFile(process.execPath, [join(packageDir, "build", "examples", "exactly-once.js")], { env: { ...process.env, LEASESVC_URL: svc.url }, timeout: 150_000 }, (err, stdout, stderr) => {
          if (err) reject(new Error(`${err.message}\n${stdout}\n${stderr}`));
          else resolve(stdout);
        });
      });
      const summary = JSON.parse(out.trim().split("\n").at(-1)!) as {
        tasks: number;
        completed: number;
        duplicates: number;
        staleAccepted: number;
        staleRejected: number;
        kills: Array<{ holder: string; token: number }>;
        terms: Record<string, number>;
        forgedRefused: string[];
        writesAfterForgery: number;
      };
      t.diagnostic(`exactly-once: ${JSON.stringify(summary)}`);
      assert.equal(summary.tasks, 1000);
      assert.equal(summary.completed, 1000);
      assert.equal(summary.duplicates, 0);
      assert.equal(summary.staleAccepted, 0);
      assert.equal(summary.kills.length, 2);
      assert.notEqual(summary.kills[0]!.holder, summary.kills[1]!.holder, "two different leaders were killed");
      assert.ok(Object.keys(summary.terms).length >= 3, "at least three terms did tasks");
      assert.deepEqual(summary.forgedRefused, ["malformed", "unknown_key"], "a bare number and a JWS under an unknown key, both with a far higher token, are refused");
      assert.ok(summary.writesAfterForgery > 0, "the true leader went on after the forgeries");
    } finally {
      await svc.stop();
    }
  });
});
