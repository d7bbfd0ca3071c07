/** The Client and the Elector against the real leasesvc binary. */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Client,
  Elector,
  InvalidArgumentError,
  LeaseHeldError,
  LeaseLostError,
  type LeaseEvent,
  NotFoundError,
  PermissionDeniedError,
  UnauthenticatedError,
} from "@leasesvc/client";
import { type Service, skipReason, startService, staticAuthEnv } from "./helpers/service.js";

const skip = skipReason();
let seq = 0;
const leaseName = (what: string): string => `svc.ts.${what}.${process.pid}.${++seq}`;

describe("real service", { skip: skip || undefined }, () => {
  let svc: Service;
  before(async () => {
    svc = await startService();
  });
  after(async () => {
    await svc?.stop();
  });

  test("operations and their errors", async () => {
    const c = new Client(svc.url);
    const name = leaseName("ops");
    const l = await c.acquire(name, { holder: "a", ttlMs: 5000, metadata: { addr: "10.0.0.1" } });
    assert.equal(l.fencingToken, 1);
    assert.equal(l.transitions, 1);
    assert.equal(l.ttlMs, 5000);
    assert.deepEqual(l.metadata, { addr: "10.0.0.1" });
    assert.ok(l.remainingMs > 0 && l.remainingMs <= 5000);
    const held = await c.acquire(name, { holder: "b", ttlMs: 5000 }).catch((e: unknown) => e);
    assert.ok(held instanceof LeaseHeldError, String(held));
    assert.equal(held.lease.holder, "a");
    assert.ok(held.retryAfterMs >= 1000 && held.retryAfterMs <= 5000, String(held.retryAfterMs));
    await assert.rejects(c.renew(name, { holder: "a", fencingToken: 7 }), LeaseLostError);
    assert.equal((await c.renew(name, { holder: "a", fencingToken: 1, ttlMs: 6000 })).ttlMs, 6000);
    assert.equal((await c.release(name, "a", 1)).held, false);
    assert.equal((await c.release(name, "a", 1)).held, false, "release is idempotent");
    await assert.rejects(c.get(leaseName("missing")), NotFoundError);
    const bad = await c.acquire(name, { holder: "a", ttlMs: 10 }).catch((e: unknown) => e);
    assert.ok(bad instanceof InvalidArgumentError, String(bad));
    assert.ok(bad.fields.some((f) => f.field === "ttlMs"), JSON.stringify(bad.fields));
    await assert.rejects(c.get("-bad-name"), InvalidArgumentError);
  });

  test("list pages and all()", async () => {
    const c = new Client(svc.url);
    const prefix = leaseName("list") + ".";
    for (let i = 0; i < 5; i++) await c.acquire(prefix + i, { holder: "h", ttlMs: 5000 });
    const p = await c.list({ prefix, pageSize: 2 });
    assert.deepEqual(p.leases.map((l) => l.name), [prefix + 0, prefix + 1]);
    assert.notEqual(p.nextPageToken, "");
    const names: string[] = [];
    for await (const l of c.all(prefix)) names.push(l.name);
    assert.deepEqual(names, [0, 1, 2, 3, 4].map((i) => prefix + i));
    await assert.rejects(c.list({ prefix, pageToken: "garbage" }), InvalidArgumentError);
  });

  test("watch: the state, then acquired and released", async () => {
    const c = new Client(svc.url);
    const name = leaseName("watch");
    const ac = new AbortController();
    const got: LeaseEvent[] = [];
    for await (const ev of c.watch(name, { signal: ac.signal })) {
      got.push(ev);
      if (got.length === 1) await c.acquire(name, { holder: "w", ttlMs: 5000 });
      if (got.length === 2) await c.release(name, "w", 1);
      if (got.length === 3) ac.abort();
    }
    assert.deepEqual(
      got.map((e) => [e.type, e.lease?.fencingToken ?? null]),
      [
        ["lease", null],
        ["acquired", 1],
        ["released", 1],
      ],
    );
    assert.equal(got[1]!.id, `${name}/1/acquired`);
  });

  test("delete: a free lease goes, keeping its token; held and missing ones are refused", async () => {
    const c = new Client(svc.url);
    const name = leaseName("delete");
    await assert.rejects(c.delete(name), NotFoundError);
    await c.acquire(name, { holder: "a", ttlMs: 30000 });
    const held = await c.delete(name).catch((e: unknown) => e);
    assert.ok(held instanceof LeaseHeldError, String(held));
    assert.equal(held.lease.holder, "a");
    const ac = new AbortController();
    const got: LeaseEvent[] = [];
    for await (const ev of c.watch(name, { signal: ac.signal })) {
      got.push(ev);
      if (got.length === 1) {
        await c.release(name, "a", 1);
        const d = await c.delete(name);
        assert.deepEqual([d.name, d.holder, d.fencingToken, d.held], [name, "a", 1, false]);
      }
      if (got.length === 3) ac.abort();
    }
    assert.deepEqual(got.map((e) => [e.type, e.lease?.fencingToken ?? null]), [["lease", 1], ["released", 1], ["deleted", 1]]);
    await assert.rejects(c.get(name), NotFoundError);
    await assert.rejects(c.delete(name), NotFoundError);
    assert.equal((await c.acquire(name, { holder: "b", ttlMs: 5000 })).fencingToken, 2);
  });

  test("two electors: one leads, the other takes over when it stops", async () => {
    const c = new Client(svc.url);
    const name = leaseName("electors");
    const tokens: Array<[string, number]> = [];
    const mk = (holder: string): Elector =>
      Elector.forClient(
        c,
        name,
        {
          holder,
          callbacks: {
            onStartedLeading: (signal, token) =>
              new Promise<void>((r) => {
                tokens.push([holder, token]);
                signal.addEventListener("abort", () => r());
              }),
          },
        },
        { ttlMs: 3000 },
      );
    const a = mk("a");
    const b = mk("b");
    const acA = new AbortController();
    const acB = new AbortController();
    const runA = a.run(acA.signal);
    let runB: Promise<void> = Promise.resolve();
    try {
      while (!a.isLeader) await new Promise((r) => setTimeout(r, 10));
      runB = b.run(acB.signal);
      await new Promise((r) => setTimeout(r, 1200));
      assert.equal(b.isLeader, false);
      acA.abort();
      await runA;
      const start = Date.now();
      while (!b.isLeader) {
        assert.ok(Date.now() - start < 2500, "b took over before a's TTL ran out");
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.deepEqual(tokens, [
        ["a", 1],
        ["b", 2],
      ]);
      assert.equal(b.token, 2);
    } finally {
      acA.abort();
      acB.abort();
      await Promise.allSettled([runA, runB]);
    }
    assert.equal((await c.get(name)).held, false, "released on stop");
  });

  test("static auth: the token is sent; none is unauthenticated; revoke needs admin", async () => {
    const auth = await startService(staticAuthEnv());
    try {
      const name = leaseName("auth");
      await assert.rejects(new Client(auth.url).get(name), UnauthenticatedError);
      await assert.rejects(new Client(auth.url, { token: "wrong-token-0123456789" }).get(name), UnauthenticatedError);
      const agent = new Client(auth.url, { token: async () => "agent-token-0123456789" });
      const l = await agent.acquire(name, { holder: "a", ttlMs: 5000 });
      assert.equal(l.principal, "agent@example.com");
      await assert.rejects(agent.revoke(name, { reason: "x" }), PermissionDeniedError);
      const admin = new Client(auth.url, { token: "admin-token-0123456789" });
      const r = await admin.revoke(name, { reason: "test", fencingToken: 1 });
      assert.equal(r.held, false);
      assert.equal(r.revokedBy, "admin@example.com");
      assert.equal(r.revokeReason, "test");
      await assert.rejects(agent.renew(name, { holder: "a", fencingToken: 1 }), LeaseLostError);
    } finally {
      await auth.stop();
    }
  });
});
