import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, test } from "node:test";
import { performance } from "node:perf_hooks";
import { Client, Elector, type ElectorOptions, InvalidArgumentError, Keeper, type KeeperOptions, LeaseLostError, SafeDeadlineError } from "@leasesvc/client";
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
  fake.seen.length = 0;
});
/** Every run a test starts, stopped after it whatever its outcome, so that a failed test cannot leave an Elector running. */
const runs: Array<{ ac: AbortController; done: Promise<unknown> }> = [];
afterEach(async () => {
  fake.fault = "none";
  for (const r of runs.splice(0)) {
    r.ac.abort();
    await r.done.catch(() => undefined);
  }
});
/** start runs e until the test ends or the returned controller is aborted. */
function start(e: Elector): { ac: AbortController; run: Promise<void> } {
  const ac = new AbortController();
  const run = e.run(ac.signal);
  runs.push({ ac, done: run });
  return { ac, run };
}

let seq = 0;
const lease = (): string => `el.${process.pid}.${++seq}`;
const client = (): Client => new Client(fake.url, { backoff: { initialMs: 5, maxMs: 20 }, requestTimeoutMs: 2000 });

/** A term as a test sees it. */
interface Term {
  token: number;
  startedAt: number;
  endedAt?: number;
  reason?: unknown;
}

/** electorWithTerms records every term of an Elector over a keeper of its own (Elector.forClient; TTL 900 ms unless ko says otherwise). */
function electorWithTerms(
  c: Client,
  name: string,
  opts: Partial<Omit<ElectorOptions, "callbacks">> = {},
  ko: KeeperOptions = {},
): { e: Elector; terms: Term[]; stopped: number; next: () => Promise<Term> } {
  const terms: Term[] = [];
  const waiters: Array<(t: Term) => void> = [];
  const rec = { e: undefined as unknown as Elector, terms, stopped: 0, next: () => new Promise<Term>((r) => waiters.push(r)) };
  rec.e = Elector.forClient(
    c,
    name,
    {
      holder: "h-" + name,
      ...opts,
      callbacks: {
        onStartedLeading: (signal, token) =>
          new Promise<void>((resolve) => {
            const t: Term = { token, startedAt: performance.now() };
            terms.push(t);
            waiters.shift()?.(t);
            signal.addEventListener("abort", () => {
              t.endedAt = performance.now();
              t.reason = signal.reason;
              resolve();
            });
          }),
        onStoppedLeading: () => rec.stopped++,
      },
    },
    { ttlMs: 900, ...ko },
  );
  return rec;
}

/** ended waits until the term has ended. */
async function ended(t: Term, withinMs = 5000): Promise<void> {
  const until = performance.now() + withinMs;
  while (t.endedAt === undefined) {
    if (performance.now() > until) throw new Error("the term did not end");
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("Elector", () => {
  test("leads with the fencing token, renews about every TTL/3, and releases on stop", async () => {
    const name = lease();
    const r = electorWithTerms(client(), name);
    const { ac, run } = start(r.e);
    const t = await r.next();
    assert.equal(t.token, 1);
    assert.equal(r.e.isLeader, true);
    assert.equal(r.e.token, 1);
    assert.deepEqual(r.e.leader, { holder: "h-" + name, fencingToken: 1 });
    await new Promise((res) => setTimeout(res, 1000)); // TTL 900: renewals every ≤ 300 ms
    const renews = fake.count(`${name}:renew`);
    assert.ok(renews >= 2 && renews <= 6, `renews in 1 s: ${renews}`);
    assert.equal(t.endedAt, undefined, "still leading while renewals succeed");
    ac.abort(new Error("shutdown"));
    await run;
    assert.match(String(t.reason), /shutdown/);
    assert.equal(r.stopped, 1);
    assert.equal(r.e.isLeader, false);
    assert.equal(fake.count(`${name}:release`), 1);
    assert.equal(fake.leases.get(name)!.expireAt <= Date.now(), true, "released");
  });

  test("lease_lost aborts the leading signal at the renew's answer, then it campaigns again", async () => {
    const name = lease();
    const r = electorWithTerms(client(), name, { waitMs: 5000 });
    const { ac, run } = start(r.e);
    const t1 = await r.next();
    const next = r.next();
    fake.revoke(name);
    const revokedAt = performance.now();
    await ended(t1);
    assert.ok(t1.reason instanceof LeaseLostError, String(t1.reason));
    assert.ok(t1.endedAt! - revokedAt < 300 + 200, "ended at the next renew (TTL/3 = 300 ms)");
    const t2 = await next;
    assert.equal(t2.token, 2);
    ac.abort();
    await run;
    assert.equal(r.stopped, 2);
  });

  for (const [fault, what] of [
    ["hang", "does not answer"],
    ["unavailable", "answers 503"],
    ["drop", "drops every connection"],
  ] as const) {
    test(`a service that ${what}: leading ends before the safe deadline`, async () => {
      const name = lease();
      const r = electorWithTerms(client(), name, {}, { ttlMs: 1200 });
      const { ac, run } = start(r.e);
      const t = await r.next();
      fake.fault = fault;
      await ended(t);
      const since = t.endedAt! - r.e.lastSentAt;
      assert.ok(t.reason instanceof SafeDeadlineError, String(t.reason));
      assert.ok(since < 1200 * 0.9, `ended ${since.toFixed(1)} ms after the last successful send (safe: 1080)`);
      // The stop time is the deadline less the default CancelBefore, min(250, 1200 / 10) = 120 ms.
      assert.ok(since > 1200 * 0.9 - 200, `not long before it: ${since.toFixed(1)} ms`);
      assert.equal(r.e.cancelBeforeMs, 120);
      assert.ok(Math.abs(r.e.safeDeadline - r.e.lastSentAt - 1200 * 0.9) < 1e-6);
      assert.equal(r.e.isLeader, false);
      fake.fault = "none";
      ac.abort();
      await run;
    });
  }

  test("a renew refused with 429 is retried no earlier than its Retry-After", async () => {
    const name = lease();
    const r = electorWithTerms(client(), name, {}, { ttlMs: 6000 });
    start(r.e);
    await r.next();
    fake.script.push({ match: `${name}:renew`, status: 429, code: "resource_exhausted", headers: { "Retry-After": "1" } });
    const renewsAt = (): number[] => fake.seen.filter((s) => s.path.endsWith(`${name}:renew`)).map((s) => s.at);
    const until = performance.now() + 6000;
    while (renewsAt().length < 2 && performance.now() < until) await new Promise((res) => setTimeout(res, 20));
    const [limited, retried] = renewsAt();
    assert.ok(limited !== undefined && retried !== undefined, "the renew was retried");
    assert.ok(retried - limited >= 990, `retried ${(retried - limited).toFixed(0)} ms after the 429`);
    assert.equal(r.terms.length, 1);
    assert.equal(r.terms[0]!.endedAt, undefined, "still leading");
  });

  test("a follower waits on the service and takes over as soon as the leader stops", async () => {
    const name = lease();
    const c = client();
    const a = electorWithTerms(c, name, { holder: "a" }, { ttlMs: 3000 });
    const b = electorWithTerms(c, name, { holder: "b" }, { ttlMs: 3000 });
    const { ac: acA, run: runA } = start(a.e);
    await a.next();
    const { ac: acB, run: runB } = start(b.e);
    const nextB = b.next();
    await new Promise((res) => setTimeout(res, 300));
    assert.equal(b.terms.length, 0);
    assert.equal(b.e.leader.holder, "a", "the follower knows who leads");
    const stopAt = performance.now();
    acA.abort();
    await runA;
    const tb = await nextB;
    assert.equal(tb.token, 2);
    assert.ok(tb.startedAt - stopAt < 1000, "taken over without waiting for the expiry");
    const waited = fake.seen.filter((s) => s.path.endsWith(":acquire") && s.body["holder"] === "b" && s.body["waitMs"] === 30000);
    assert.ok(waited.length >= 1, "the follower's acquire waited on the service");
    acB.abort();
    await runB;
  });

  test("returning from onStartedLeading resigns: the lease is released and run resolves", async () => {
    const name = lease();
    let stopped = 0;
    const e = Elector.forClient(client(), name, { holder: "r", callbacks: { onStartedLeading: async () => {}, onStoppedLeading: () => stopped++ } }, { ttlMs: 900 });
    await e.run();
    assert.equal(stopped, 1);
    assert.equal(fake.count(`${name}:release`), 1);
  });

  test("a permanent refusal rejects run", async () => {
    fake.script.push({ match: ":acquire", status: 400, code: "invalid_argument", body: { errors: [{ field: "ttlMs", detail: "too short" }] } });
    const e = Elector.forClient(client(), lease(), { callbacks: { onStartedLeading: () => {} } });
    await assert.rejects(e.run(), InvalidArgumentError);
  });

  test("a transient acquire failure is retried", async () => {
    const name = lease();
    fake.script.push({ match: ":acquire", status: 503, code: "unavailable" });
    const r = electorWithTerms(client(), name);
    const { ac, run } = start(r.e);
    assert.equal((await r.next()).token, 1);
    ac.abort();
    await run;
  });

  test("options are checked, naming the field: the Elector's by the Elector, the keeper's by the Keeper", () => {
    const c = client();
    const ok = { callbacks: { onStartedLeading: () => {} } };
    const k = new Keeper(c, { plainRenewals: true, ttlMs: 3000 });
    assert.throws(() => new Elector(k, "-bad", ok), /lease name/);
    assert.throws(() => new Elector(k, "n", {} as ElectorOptions), /onStartedLeading/);
    assert.throws(() => new Elector(k, "n", { ...ok, waitMs: 70_000 }), /waitMs/);
    assert.throws(() => new Elector(k, "n", { ...ok, holder: "a\nb" }), /holder/);
    assert.throws(() => new Elector(k, "n", { ...ok, cancelBeforeMs: -1 }), /cancelBeforeMs/);
    assert.throws(() => Elector.forClient(c, "n", ok, { ttlMs: 1.5 }), /ttlMs/);
    assert.throws(() => Elector.forClient(c, "n", ok, { driftMargin: 0.9 }), /driftMargin/);
    assert.throws(() => Elector.forClient(c, "n", ok, { renewJitter: 0.7 }), /renewJitter/);
    assert.throws(() => Elector.forClient(c, "n", ok, { ttlMs: 3000, renewIntervalMs: 2700 }), /renewIntervalMs/);
    const e = Elector.forClient(c, "n", ok);
    assert.deepEqual(e.options, { ttlMs: 30000, renewIntervalMs: 10000, driftMargin: 0.1, renewJitter: 0.1, waitMs: 30000, cancelBeforeMs: undefined });
    assert.equal(e.cancelBeforeMs, undefined, "a session's window is not known before run chose the mode");
    assert.equal(new Elector(k, "n", ok).cancelBeforeMs, 250, "plain, TTL 3000: min(250, 300)");
    assert.equal(new Elector(k, "n", ok).keeper, k);
    assert.match(e.holder, /-\d+$/);
  });

  test("the deprecated Client form still works: its keeper fields go to a keeper built for each run", async () => {
    const name = lease();
    let leads = 0;
    const onStartedLeading = async (): Promise<void> => void leads++; // resigns at once
    const legacy = { holder: "old", ttlMs: 1200, plainRenewals: true, cancelBeforeMs: 300, onStartedLeading };
    assert.throws(() => new Elector(client(), name, { onStartedLeading, ttlMs: 1.5 }), /ttlMs/);
    assert.throws(() => new Elector(client(), name, { ...legacy, cancelBeforeMs: 480 }), InvalidArgumentError, "1200 × 0.9 − 600 = 480");
    const e = new Elector(client(), name, legacy);
    const first = e.keeper;
    assert.deepEqual([first.mode, first.plainReason, first.ttlMs, e.cancelBeforeMs], ["plain", "asked", 1200, 300]);
    await e.run();
    assert.equal(leads, 1);
    assert.deepEqual(fake.seen.find((x) => x.path.endsWith(`${name}:acquire`))!.body, { holder: "old", ttlMs: 1200 });
    assert.equal(first.failed instanceof Error, true, "the run's keeper is closed with it");
    await e.run();
    assert.equal(leads, 2);
    assert.notEqual(e.keeper, first, "a new keeper for the next run");
  });

  test("run refuses to run twice at once", async () => {
    const e = Elector.forClient(client(), lease(), { callbacks: { onStartedLeading: (s) => new Promise((r) => s.addEventListener("abort", () => r())) } }, { ttlMs: 900 });
    const { ac, run } = start(e);
    await assert.rejects(e.run(), /already running/);
    ac.abort();
    await run;
  });
});
