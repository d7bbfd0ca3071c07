/**
 * Succession (docs/contract.md §8): what the Client sends and reads
 * (against the fake), and priorities, checkpoints, transfer,
 * lease_reserved, preemption and the Elector's step-down and transfer
 * against the real leasesvc binary.
 */
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import {
  Client,
  Elector,
  type ElectorCallbacks,
  type ElectorOptions,
  Keeper,
  type KeeperOptions,
  LeaseHeldError,
  LeaseLostError,
  LeaseReservedError,
  type Lease,
  NotLeadingError,
  type TermInfo,
  TransferredError,
  YieldedError,
} from "@leasesvc/client";
import { FakeService } from "./helpers/fake.js";
import { type Service, skipReason, startService } from "./helpers/service.js";

const leaseJSON = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  name: "a",
  holder: "me",
  fencingToken: 1,
  ttlMs: 1000,
  acquireTime: "2026-01-01T00:00:00Z",
  renewTime: "2026-01-01T00:00:00Z",
  expireTime: "2026-01-01T00:00:01Z",
  held: true,
  remainingMs: 1000,
  serverTime: "2026-01-01T00:00:00Z",
  transitions: 1,
  metadata: {},
  ...extra,
});

describe("succession on the wire (fake)", () => {
  let fake: FakeService;
  before(async () => {
    fake = await FakeService.start();
  });
  after(async () => {
    await fake.close();
  });
  beforeEach(() => {
    fake.script.length = 0;
    fake.seen.length = 0;
  });

  test("the request bodies carry priority, preempt, checkpoint, to, reserveMs and toPrincipal", async () => {
    for (let i = 0; i < 9; i++) fake.script.push({ match: "*", status: 200, body: leaseJSON() });
    const c = new Client(fake.url);
    await c.acquire("a", { holder: "me", ttlMs: 1000, waitMs: 2000, priority: 7, preempt: true });
    await c.acquire("a", { holder: "me", ttlMs: 1000, priority: 0 });
    await c.acquire("a", { holder: "me", ttlMs: 1000 });
    await c.renew("a", { holder: "me", fencingToken: 1, checkpoint: { n: 1 } });
    await c.release("a", "me", 1, { checkpoint: { n: 2 } });
    await c.release("a", "me", 1);
    await c.transfer("a", { holder: "me", fencingToken: 1, to: "you", checkpoint: { n: 3 }, reserveMs: 2500 });
    await c.transfer("a", { holder: "me", fencingToken: 1, to: "you" });
    await c.transfer("a", { holder: "me", fencingToken: 1, to: "you", toPrincipal: "you@example.com" });
    assert.deepEqual(
      fake.seen.map((s) => s.body),
      [
        { holder: "me", ttlMs: 1000, waitMs: 2000, priority: 7, preempt: true },
        { holder: "me", ttlMs: 1000, priority: 0 },
        { holder: "me", ttlMs: 1000 },
        { holder: "me", fencingToken: 1, checkpoint: { n: 1 } },
        { holder: "me", fencingToken: 1, checkpoint: { n: 2 } },
        { holder: "me", fencingToken: 1 },
        { holder: "me", fencingToken: 1, to: "you", checkpoint: { n: 3 }, reserveMs: 2500 },
        { holder: "me", fencingToken: 1, to: "you" },
        { holder: "me", fencingToken: 1, to: "you", toPrincipal: "you@example.com" },
      ],
    );
    assert.ok(fake.seen.at(-1)!.path.endsWith("/v1/leases/a:transfer"));
    // The service refuses a POST without it (docs/contract.md §4).
    for (const s of fake.seen) assert.equal(s.headers["content-type"], "application/json", s.path);
  });

  test("the lease's succession fields are read, and zero when absent", async () => {
    fake.script.push({
      match: "*",
      status: 200,
      body: leaseJSON({ priority: 5, checkpoint: { k: [1] }, checkpointToken: 4, reservedFor: "b", reservedUntil: "2026-01-01T00:00:05Z", yieldRequested: true, yieldTo: "c", candidates: 2, bestCandidatePriority: 0 }),
    });
    fake.script.push({ match: "*", status: 200, body: leaseJSON() });
    const c = new Client(fake.url);
    const l = await c.get("a");
    assert.deepEqual(
      [l.priority, l.checkpoint, l.checkpointToken, l.reservedFor, l.reservedUntil?.toISOString(), l.yieldRequested, l.yieldTo, l.candidates, l.bestCandidatePriority],
      [5, { k: [1] }, 4, "b", "2026-01-01T00:00:05.000Z", true, "c", 2, 0],
    );
    const p = await c.get("a");
    assert.deepEqual([p.priority, p.checkpoint, p.checkpointToken, p.reservedFor, p.reservedUntil, p.yieldRequested, p.yieldTo, p.candidates, p.bestCandidatePriority], [0, null, 0, "", null, false, "", 0, null]);
  });

  test("lease_reserved throws LeaseReservedError with the lease, whom, until when and Retry-After; not retried", async () => {
    fake.script.push({
      match: ":acquire",
      status: 409,
      code: "lease_reserved",
      headers: { "Retry-After": "4" },
      body: { reservedFor: "heir", reservedUntil: "2026-01-01T00:00:04Z", lease: leaseJSON({ holder: "old", fencingToken: 3, held: false }) },
    });
    const c = new Client(fake.url, { maxAttempts: 3 });
    const err = await c.acquire("a", { holder: "me", ttlMs: 1000 }).catch((e: unknown) => e);
    assert.ok(err instanceof LeaseReservedError, String(err));
    assert.ok(!(err instanceof LeaseHeldError));
    assert.deepEqual([err.code, err.status, err.reservedFor, err.reservedUntil?.toISOString(), err.retryAfterMs, err.lease.holder, err.lease.fencingToken], [
      "lease_reserved",
      409,
      "heir",
      "2026-01-01T00:00:04.000Z",
      4000,
      "old",
      3,
    ]);
    assert.equal(fake.count(":acquire"), 1);
  });
});

describe("Elector succession steps (fake)", () => {
  let fake: FakeService;
  before(async () => {
    fake = await FakeService.start();
  });
  after(async () => {
    await fake.close();
  });

  test("without onYieldRequested it steps down at once on yieldRequested; renew and release carry the checkpoint", async () => {
    const name = "yield.fake";
    for (let i = 0; i < 3; i++) fake.script.push({ match: ":renew", status: 200, body: leaseJSON({ name, fencingToken: 1, yieldRequested: true, yieldTo: "boss" }) });
    const c = new Client(fake.url);
    const stop = new AbortController();
    const reasons: unknown[] = [];
    let e!: Elector;
    let done!: () => void;
    const returned = new Promise<void>((r) => (done = r));
    e = Elector.forClient(
      c,
      name,
      {
        holder: "me",
        waitMs: -1,
        priority: 2,
        callbacks: {
          onStartedLeading: (signal) =>
            new Promise<void>((resolve) => {
              if (reasons.length > 0) return resolve();
              e.setCheckpoint({ at: 1 });
              signal.addEventListener(
                "abort",
                () => {
                  reasons.push(signal.reason);
                  e.setCheckpoint({ at: 2 }); // after the step-down, before returning: the release carries it
                  resolve();
                  done();
                },
                { once: true },
              );
            }),
        },
      },
      { ttlMs: 1500 },
    );
    const run = e.run(stop.signal);
    await returned;
    await new Promise((r) => setTimeout(r, 200));
    stop.abort();
    await run;
    assert.ok(reasons[0] instanceof YieldedError, String(reasons[0]));
    assert.equal((reasons[0] as YieldedError).to, "boss");
    const bodies = (suffix: string) => fake.seen.filter((s) => s.path.endsWith(suffix)).map((s) => s.body);
    assert.deepEqual(bodies(":acquire")[0], { holder: "me", ttlMs: 1500, priority: 2 });
    assert.deepEqual(bodies(":renew")[0], { holder: "me", fencingToken: 1, checkpoint: { at: 1 } });
    assert.deepEqual(bodies(":release")[0], { holder: "me", fencingToken: 1, checkpoint: { at: 2 } });
  });
});

const skip = skipReason();
let seq = 0;
const leaseName = (what: string): string => `succ.ts.${what}.${process.pid}.${++seq}`;

describe("succession against the real service", { skip: skip || undefined }, () => {
  let svc: Service;
  before(async () => {
    svc = await startService();
  });
  after(async () => {
    await svc?.stop();
  });

  test("acquire records the priority", async () => {
    const c = new Client(svc.url);
    assert.equal((await c.acquire(leaseName("prio"), { holder: "a", ttlMs: 5000, priority: 42 })).priority, 42);
  });

  test("transfer reserves the lease for the successor, who gets token + 1 and the checkpoint", async () => {
    const c = new Client(svc.url);
    const name = leaseName("transfer");
    const a = await c.acquire(name, { holder: "a", ttlMs: 5000 });
    await c.renew(name, { holder: "a", fencingToken: a.fencingToken, checkpoint: { step: 1 } });
    const t = await c.transfer(name, { holder: "a", fencingToken: a.fencingToken, to: "b", checkpoint: { step: 2 }, reserveMs: 5000 });
    assert.deepEqual([t.held, t.reservedFor, t.checkpoint, t.checkpointToken], [false, "b", { step: 2 }, 1]);
    const err = await c.acquire(name, { holder: "c", ttlMs: 5000 }).catch((e: unknown) => e);
    assert.ok(err instanceof LeaseReservedError, String(err));
    assert.equal(err.reservedFor, "b");
    assert.ok(err.reservedUntil instanceof Date);
    assert.ok(err.retryAfterMs >= 1000);
    const b = await c.acquire(name, { holder: "b", ttlMs: 5000 });
    assert.deepEqual([b.holder, b.fencingToken, b.checkpoint, b.checkpointToken], ["b", 2, { step: 2 }, 1]);
    await assert.rejects(c.transfer(name, { holder: "a", fencingToken: a.fencingToken, to: "c" }), LeaseLostError);
  });

  test("a preempting candidate of higher priority makes renewals answer yieldRequested", async () => {
    const c = new Client(svc.url);
    const name = leaseName("preempt");
    const a = await c.acquire(name, { holder: "a", ttlMs: 5000, priority: 1 });
    const waiting = c.acquire(name, { holder: "b", ttlMs: 5000, waitMs: 10_000, priority: 9, preempt: true });
    let r: Lease;
    const deadline = Date.now() + 5000;
    for (;;) {
      r = await c.renew(name, { holder: "a", fencingToken: a.fencingToken });
      if (r.yieldRequested || Date.now() > deadline) break;
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.deepEqual([r.yieldRequested, r.yieldTo, r.candidates], [true, "b", 1]);
    await c.release(name, "a", a.fencingToken, { checkpoint: { done: 7 } });
    const b = await waiting;
    assert.deepEqual([b.holder, b.fencingToken, b.priority, b.checkpoint], ["b", 2, 9, { done: 7 }]);
  });

  /** elector starts an Elector (over a keeper of its own: TTL 3000 unless ko says otherwise) and resolves once it leads. */
  async function leading(name: string, holder: string, extra: Partial<Omit<ElectorOptions, "callbacks">>, cbs: Omit<ElectorCallbacks, "onStartedLeading"> = {}, ko: KeeperOptions = {}) {
    const c = new Client(svc.url);
    const stop = new AbortController();
    const terms: Array<{ token: number; info: TermInfo; signal: AbortSignal }> = [];
    let first!: () => void;
    const started = new Promise<void>((r) => (first = r));
    const e = Elector.forClient(
      c,
      name,
      {
        holder,
        ...extra,
        callbacks: {
          ...cbs,
          onStartedLeading: (signal, token, info) =>
            new Promise<void>((resolve) => {
              terms.push({ token, info, signal });
              first();
              signal.addEventListener("abort", () => resolve(), { once: true });
            }),
        },
      },
      { ttlMs: 3000, ...ko },
    );
    const run = e.run(stop.signal);
    await started;
    return { c, e, terms, stop: async () => { stop.abort(); await run; } };
  }

  test("Elector: options are checked; no term, no checkpoint", () => {
    const k = new Keeper(new Client(svc.url));
    const callbacks = { onStartedLeading: (): void => {} };
    assert.throws(() => new Elector(k, "a", { callbacks, priority: 1001 }), /priority/);
    assert.throws(() => new Elector(k, "a", { callbacks, priority: -1 }), /priority/);
    assert.throws(() => new Elector(k, "a", { callbacks, preempt: true, waitMs: -1 }), /preempt/);
    const e = new Elector(k, "a", { callbacks });
    assert.throws(() => e.setCheckpoint({ x: 1 }), NotLeadingError);
    assert.throws(() => e.setCheckpoint([1] as unknown as Record<string, unknown>), TypeError);
  });

  test("Elector: steps down for a preempting candidate, releasing with the checkpoint set on the request", async () => {
    const name = leaseName("elector-yield");
    const asked: string[] = [];
    let el!: Elector;
    const { c, e, terms, stop } = await leading(
      name,
      "low",
      { priority: 1 },
      {
        onYieldRequested: (_signal, to) => {
          asked.push(to);
          el.setCheckpoint({ progress: 10 });
        },
      },
      { renewIntervalMs: 300 },
    );
    el = e;
    try {
      assert.equal(terms[0]!.token, 1);
      e.setCheckpoint({ progress: 1 });
      const got = await c.acquire(name, { holder: "high", ttlMs: 5000, waitMs: 10_000, priority: 9, preempt: true });
      assert.deepEqual([got.holder, got.fencingToken, got.checkpoint, got.checkpointToken], ["high", 2, { progress: 10 }, 1]);
      assert.deepEqual(asked, ["high"]);
      assert.ok(terms[0]!.signal.reason instanceof YieldedError, String(terms[0]!.signal.reason));
      assert.equal((await c.get(name)).priority, 9);
    } finally {
      await stop();
    }
  });

  test("Elector: inherits the checkpoint, writes one at once, transfers", async () => {
    const name = leaseName("elector-transfer");
    const c0 = new Client(svc.url);
    const seed = await c0.acquire(name, { holder: "seed", ttlMs: 5000 });
    await c0.release(name, "seed", seed.fencingToken, { checkpoint: { from: "seed" } });
    const { c, e, terms, stop } = await leading(name, "one", { priority: 3 });
    try {
      assert.deepEqual([terms[0]!.token, terms[0]!.info.checkpoint, terms[0]!.info.checkpointToken], [2, { from: "seed" }, 1]);
      assert.equal((await c.get(name)).priority, 3);
      const stored = await e.checkpoint({ from: "one", n: 1 });
      assert.deepEqual([stored.checkpoint, stored.checkpointToken], [{ from: "one", n: 1 }, 2]);
      const t = await e.transfer("two", { from: "one", n: 2 });
      assert.deepEqual([t.held, t.reservedFor], [false, "two"]);
      assert.ok(terms[0]!.signal.reason instanceof TransferredError, String(terms[0]!.signal.reason));
      assert.equal(e.isLeader, false);
      assert.throws(() => e.setCheckpoint({ late: true }), NotLeadingError);
      const two = await c.acquire(name, { holder: "two", ttlMs: 5000 });
      assert.deepEqual([two.fencingToken, two.checkpoint, two.checkpointToken], [3, { from: "one", n: 2 }, 2]);
    } finally {
      await stop();
    }
  });
});
