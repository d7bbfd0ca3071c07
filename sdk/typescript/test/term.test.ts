import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { performance } from "node:perf_hooks";
import { Client } from "../src/client.js";
import { DeniedError, LeaseLostError, SafeDeadlineError } from "../src/errors.js";
import { Term, type TermHost } from "../src/term.js";
import { FakeService } from "./helpers/fake.js";

let fake: FakeService;
before(async () => {
  fake = await FakeService.start();
});
after(async () => {
  await fake.close();
});
beforeEach(() => {
  fake.fault = "none";
  fake.script.length = 0;
});

let seq = 0;

/** A term of a fresh holding on the fake, with a host that records what the term told it. */
async function newTerm(spanMs = 2_000): Promise<{ t: Term; ended: Promise<unknown>; renewals: Array<{ sentAt: number; deadline: number }>; name: string }> {
  const c = new Client(fake.url, { backoff: { initialMs: 5, maxMs: 20 }, requestTimeoutMs: 2000 });
  const name = `term.${process.pid}.${++seq}`;
  const sent = performance.now();
  const l = await c.acquire(name, { holder: "h", ttlMs: 3_000 });
  const renewals: Array<{ sentAt: number; deadline: number }> = [];
  let end!: (reason: unknown) => void;
  const ended = new Promise<unknown>((r) => (end = r));
  const host: TermHost = {
    client: c,
    name,
    holder: "h",
    logger: { info() {}, warn() {} },
    spanMs,
    releaseTimeoutMs: 1_000,
    renewDelay: () => 20,
    retryDelay: () => 5,
    attemptTimeoutMs: () => 500,
    end: (reason) => end(reason),
    renewed: (_l, sentAt, deadline) => renewals.push({ sentAt, deadline }),
  };
  const t = new Term(host, l.fencingToken, sent);
  return { t, ended, renewals, name };
}

/** waitFor polls cond every few ms until it holds. */
async function waitFor(what: string, cond: () => boolean): Promise<void> {
  const until = performance.now() + 10_000;
  while (!cond()) {
    if (performance.now() > until) assert.fail("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("term phases", () => {
  test("renewing: each renew moves the safe deadline to its send time + span", async () => {
    const { t, renewals } = await newTerm();
    assert.equal(t.phase, "renewing");
    t.start();
    await waitFor("two renewals", () => renewals.length >= 2);
    assert.equal(t.phase, "renewing");
    for (const r of renewals) assert.equal(r.deadline, r.sentAt + 2_000);
    assert.equal(t.sentAt, renewals.at(-1)!.sentAt);
    await t.finish(true);
    assert.equal(t.phase, "released");
    assert.equal(fake.count(":release"), 1);
  });

  test("lease_lost: gone, ended at once, nothing released", async () => {
    const { t, ended } = await newTerm();
    fake.script.push({ match: ":renew", status: 409, code: "lease_lost" });
    t.start();
    assert.ok((await ended) instanceof LeaseLostError);
    assert.equal(t.phase, "gone");
    assert.ok(t.closed instanceof LeaseLostError);
    const releases = fake.count(":release");
    await t.finish(true);
    assert.equal(t.phase, "gone");
    assert.equal(fake.count(":release"), releases);
  });

  test("refused for good: stopped, and a release may still end it", async () => {
    const { t, ended } = await newTerm();
    fake.script.push({ match: ":renew", status: 403, code: "permission_denied" });
    t.start();
    assert.ok((await ended) instanceof DeniedError);
    assert.equal(t.phase, "stopped");
    await t.finish(true);
    assert.equal(t.phase, "released");
  });

  test("renewals failing: stopped at the safe deadline", async () => {
    const { t, ended } = await newTerm(300);
    fake.fault = "unavailable";
    t.start();
    const reason = await ended;
    assert.ok(reason instanceof SafeDeadlineError, String(reason));
    assert.equal(t.phase, "stopped");
    fake.fault = "none";
    await t.finish(false);
    assert.equal(t.phase, "stopped");
  });

  test("transferred: gone, and finish releases nothing", async () => {
    const { t, ended } = await newTerm();
    t.start();
    const why = new Error("transferred");
    t.transferred("other", why);
    assert.equal(await ended, why);
    assert.equal(t.phase, "gone");
    assert.equal(t.closed, why);
    const releases = fake.count(":release");
    await t.finish(true);
    assert.equal(fake.count(":release"), releases);
  });
});
