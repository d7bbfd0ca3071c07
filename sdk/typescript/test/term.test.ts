import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { Client } from "../src/client.js";
import { DeniedError, LeaseLostError, SafeDeadlineError } from "../src/errors.js";
import { Keeper } from "../src/keeper.js";
import { Term } from "../src/term.js";
import { FakeService } from "./helpers/fake.js";
import { FakeClock } from "./helpers/fakeclock.js";

// A term leads on a Keeper's holding (issue 38): it follows the holding's
// deadline, less its CancelBefore (stopTime), and ends when the holding is lost or refused.
// Timers run on a FakeClock.

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

/** A term of a fresh plain holding (TTL 3 s: deadline = send time + 2,700 ms) on the fake, with deps that record what the term told them. */
async function newTerm(cancelBeforeMs = 700): Promise<{ t: Term; clock: FakeClock; ended: Promise<unknown>; renewals: Array<{ sentAt: number; deadline: number }>; name: string }> {
  const c = new Client(fake.url, { backoff: { initialMs: 5, maxMs: 20 }, requestTimeoutMs: 2000 });
  const clock = new FakeClock();
  const k = new Keeper(c, { plainRenewals: true, ttlMs: 3_000, renewIntervalMs: 20, renewJitter: 0, retryBackoff: { initialMs: 5, maxMs: 5 }, clock });
  const name = `term.${process.pid}.${++seq}`;
  const h = await k.hold(name, { holder: "h" });
  const renewals: Array<{ sentAt: number; deadline: number }> = [];
  let end!: (reason: unknown) => void;
  const ended = new Promise<unknown>((r) => (end = r));
  const t = new Term({
    holding: h,
    clock,
    logger: { info() {}, warn() {} },
    cancelBeforeMs,
    end: (reason) => end(reason),
    yieldRequested: () => undefined,
    renewed: (_l, sentAt, deadline) => renewals.push({ sentAt, deadline }),
  });
  return { t, clock, ended, renewals, name };
}

/**
 * renewed resolves once n renewals were reported, advancing the clock a renewal interval at a time.
 * A renewal whose request timed out (real time, on a loaded machine) retries after a backoff on the
 * fake clock: while one is awaited, the clock moves on by that backoff (5 ms) now and then, so that
 * the retry goes out instead of waiting for ever.
 */
async function renewed(r: { clock: FakeClock; renewals: unknown[] }, n: number): Promise<void> {
  while (r.renewals.length < n) {
    const before = r.renewals.length;
    r.clock.advance(20);
    const until = Date.now() + 10_000;
    let nudged = Date.now();
    while (r.renewals.length === before) {
      if (Date.now() > until) assert.fail("no renewal reported");
      if (Date.now() - nudged > 500) {
        r.clock.advance(5);
        nudged = Date.now();
      }
      await new Promise((res) => setImmediate(res));
    }
  }
}

describe("term phases", () => {
  test("renewing: each renewal moves the stop time to its send time + TTL × (1 − driftMargin) − cancelBeforeMs", async () => {
    const r = await newTerm();
    const { t } = r;
    assert.equal(t.phase, "renewing");
    t.start();
    await renewed(r, 2);
    assert.equal(t.phase, "renewing");
    for (const x of r.renewals) assert.equal(x.deadline, x.sentAt + 2_700 - 700);
    assert.equal(t.sentAt, r.renewals.at(-1)!.sentAt);
    await t.finish(true);
    assert.equal(t.phase, "released");
    assert.equal(fake.count(":release"), 1);
  });

  test("lease_lost: gone, ended at once, nothing released", async () => {
    const { t, clock, ended } = await newTerm();
    fake.script.push({ match: ":renew", status: 409, code: "lease_lost" });
    t.start();
    clock.advance(20);
    assert.ok((await ended) instanceof LeaseLostError);
    assert.equal(t.phase, "gone");
    assert.ok(t.closed instanceof LeaseLostError);
    const releases = fake.count(":release");
    await t.finish(true);
    assert.equal(t.phase, "gone");
    assert.equal(fake.count(":release"), releases);
  });

  test("refused for good: stopped, and a release may still end it", async () => {
    const { t, clock, ended } = await newTerm();
    fake.script.push({ match: ":renew", status: 403, code: "permission_denied" });
    t.start();
    clock.advance(20);
    assert.ok((await ended) instanceof DeniedError);
    assert.equal(t.phase, "stopped");
    const releases = fake.count(":release");
    await t.finish(true);
    assert.equal(t.phase, "released");
    assert.equal(fake.count(":release"), releases + 1);
  });

  test("renewals failing: stopped at the safe deadline less cancelBeforeMs, before the holding's deadline", async () => {
    const { t, clock, ended } = await newTerm(300);
    fake.fault = "unavailable";
    t.start();
    const stopAt = t.stopAt;
    assert.equal(stopAt, t.holding.deadline - 300);
    clock.advance(stopAt - clock.now() - 1);
    assert.equal(t.phase, "renewing");
    clock.advance(1);
    const reason = await ended;
    assert.ok(reason instanceof SafeDeadlineError, String(reason));
    assert.equal(t.phase, "stopped");
    assert.equal(t.holding.state, "held", "the holding's own deadline is still ahead");
    fake.fault = "none";
    await t.finish(false);
    assert.equal(t.phase, "stopped");
    assert.equal(t.holding.state, "dropped");
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
