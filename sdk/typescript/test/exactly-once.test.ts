/** The exactly-once example against the real binary, and its fencing sink on its own. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FencingSink } from "../examples/exactly-once.js";
import { packageDir, skipReason, startService } from "./helpers/service.js";

describe("exactly-once example", () => {
  test("the fencing sink refuses tokens lower than the highest it has seen", () => {
    const s = new FencingSink(3);
    assert.deepEqual(s.claim(1, "a", 2), [0, 1]);
    assert.equal(s.complete(0, 1, "a"), true);
    assert.deepEqual(s.claim(2, "b", 5), [1, 2], "a newer leader claims the tasks not done");
    assert.equal(s.complete(1, 1, "a"), false, "the old leader's write is refused");
    assert.equal(s.claim(1, "a"), undefined, "and so is its claim");
    assert.equal(s.staleRejected, 2);
    assert.equal(s.complete(1, 2, "b"), true);
    assert.equal(s.complete(1, 2, "b"), true);
    assert.equal(s.duplicates, 1, "a task completed twice is counted");
    assert.equal(s.staleAccepted, 0);
  });

  test("5 agents, 1,000 tasks, the leader killed twice: 0 duplicates, 0 stale writes accepted", { skip: skipReason() || undefined }, async (t) => {
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
      };
      t.diagnostic(`exactly-once: ${JSON.stringify(summary)}`);
      assert.equal(summary.tasks, 1000);
      assert.equal(summary.completed, 1000);
      assert.equal(summary.duplicates, 0);
      assert.equal(summary.staleAccepted, 0);
      assert.equal(summary.kills.length, 2);
      assert.notEqual(summary.kills[0]!.holder, summary.kills[1]!.holder, "two different leaders were killed");
      assert.ok(Object.keys(summary.terms).length >= 3, "at least three terms did tasks");
    } finally {
      await svc.stop();
    }
  });
});
