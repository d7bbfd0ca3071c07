import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { Client, Elector, Keeper, LeaseError, LeaseLostError, type Holding, type HoldingEvent, type KeeperOptions } from "@leasesvc/client";
import { FakeService } from "./helpers/fake.js";
import { FakeClock } from "./helpers/fakeclock.js";
import { FakeSessionServer } from "./helpers/fakesession.js";

// The keeper (issue 38): one object that keeps leases by plain renewals or
// through a session, owns the deadline and says when it moves and when the
// holding is lost. Plain-mode timers run on a FakeClock: no test sleeps.

let rest: FakeService;
let ses: FakeSessionServer;
before(async () => {
  rest = await FakeService.start();
  ses = await FakeSessionServer.start();
  // Sessions upgrade through the REST fake's port too, so one Client talks to both.
  rest.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => ses.server.emit("upgrade", req, socket, head));
});
after(async () => {
  await rest.close();
  await ses.close();
});

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  rest.fault = "none";
  rest.script.length = 0;
  ses.refuseOpen = 0;
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

let seq = 0;
const lease = (): string => `keep.${process.pid}.${++seq}`;
const client = (url: string): Client => new Client(url, { requestTimeoutMs: 2000, backoff: { initialMs: 5, maxMs: 20 } });

function keeper(url: string, opts: KeeperOptions): { k: Keeper; clock: FakeClock; logs: string[] } {
  const clock = new FakeClock();
  const logs: string[] = [];
  const k = new Keeper(client(url), {
    clock,
    logger: { info: (m, f) => void logs.push(`${m} ${JSON.stringify(f)}`), warn: (m, f) => void logs.push(`${m} ${JSON.stringify(f)}`) },
    ...opts,
  });
  cleanups.push(() => k.close());
  return { k, clock, logs };
}

/** next resolves to the holding's next event of kind. */
function next(h: Holding, kind: HoldingEvent["kind"]): Promise<HoldingEvent> {
  return new Promise((resolve) => {
    const off = h.onChange((ev) => {
      if (ev.kind !== kind) return;
      off();
      resolve(ev);
    });
  });
}

describe("keeper, plain renewals", () => {
  test("held: the deadline is the acquire's send time + TTL × (1 − driftMargin); a renewal moves it", async () => {
    const { k, clock } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000, renewJitter: 0 });
    const at = clock.now();
    const h = await k.hold(lease(), { holder: "a" });
    assert.equal(k.mode, "plain");
    assert.equal(h.mode, "plain");
    assert.equal(h.state, "held");
    assert.equal(h.lease.fencingToken, h.token);
    assert.equal(h.deadline, at + 3000 * 0.9);
    const moved = next(h, "moved");
    clock.advance(1000); // the renewal is due ttl/3 after the acquire
    const ev = await moved;
    assert.equal(ev.kind, "moved");
    assert.equal(rest.count(":renew"), 1);
    assert.equal(h.deadline, at + 1000 + 3000 * 0.9);
    assert.equal(h.confirmedAt, at + 1000);
  });

  test("lost: a renewal answered lease_lost ends the holding at once; nothing is released", async () => {
    const { k, clock } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const h = await k.hold(lease(), { holder: "a" });
    const releases = rest.count(":release");
    rest.script.push({ match: ":renew", status: 409, code: "lease_lost" });
    const lost = next(h, "lost");
    clock.advance(1000);
    const ev = await lost;
    assert.ok(ev.kind === "lost" && ev.error instanceof LeaseLostError && ev.error.code === "lease_lost", JSON.stringify(ev));
    assert.equal(h.state, "lost");
    await assert.rejects(h.release(), LeaseLostError);
    assert.equal(rest.count(":release"), releases);
  });

  test("lost: renewals failing, the deadline passes with no confirmation", async () => {
    const { k, clock } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const h = await k.hold(lease(), { holder: "a" });
    rest.fault = "unavailable";
    const lost = next(h, "lost");
    clock.advance(3000 * 0.9 - 1);
    assert.equal(h.state, "held");
    clock.advance(1);
    const ev = await lost;
    assert.ok(ev.kind === "lost" && ev.error.code === "lease_lost");
  });

  test("renew with a checkpoint, then release with one: the holding ends (not lost) and renews no more", async () => {
    const { k, clock } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const name = lease();
    const h = await k.hold(name, { holder: "a" });
    const sentAt = clock.now();
    clock.t += 5;
    await h.renew({ n: 1 });
    assert.equal(h.deadline, sentAt + 5 + 3000 * 0.9);
    assert.deepEqual(rest.seen.at(-1)!.body["checkpoint"], { n: 1 });
    let events = 0;
    h.onChange(() => events++);
    await h.release({ n: 2 });
    assert.equal(h.state, "released");
    assert.deepEqual(rest.seen.at(-1)!.body["checkpoint"], { n: 2 });
    const renews = rest.count(":renew");
    clock.advance(10_000);
    assert.equal(rest.count(":renew"), renews);
    assert.equal(events, 0, "a release is no loss");
    assert.equal(clock.armed, 0);
  });

  test("a staged checkpoint goes with the next renewal and is then no longer pending", async () => {
    const { k, clock } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const h = await k.hold(lease(), { holder: "a" });
    h.stage({ n: 7 });
    assert.deepEqual(h.pending, { n: 7 });
    const moved = next(h, "moved");
    clock.advance(1000);
    await moved;
    assert.deepEqual(rest.seen.at(-1)!.body["checkpoint"], { n: 7 });
    assert.equal(h.pending, undefined);
  });

  test("transfer ends the holding (not lost)", async () => {
    const { k } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const h = await k.hold(lease(), { holder: "a" });
    h.stage({ n: 3 });
    // The REST fake has no transfers: answer this one as the service would.
    rest.script.push({ match: ":transfer", status: 200, body: { ...h.lease, held: false, reservedFor: "b" } as unknown as Record<string, unknown> });
    await h.transfer("b", 1000);
    assert.equal(h.state, "transferred");
    const body = rest.seen.at(-1)!.body;
    assert.equal(body["to"], "b");
    assert.deepEqual(body["checkpoint"], { n: 3 });
    await assert.rejects(h.renew(), LeaseLostError);
  });

  test("a service without sessions: mode session falls back to plain and says so", async () => {
    const bare = await FakeService.start(); // no sessions route
    cleanups.push(() => bare.close());
    const { k, logs } = keeper(bare.url, { ttlMs: 3000, logPrefix: "test keeper" });
    const h = await k.hold(lease(), { holder: "a" });
    assert.equal(k.mode, "plain");
    assert.equal(h.mode, "plain");
    assert.ok(logs.some((l) => l.startsWith("test keeper: plain renewals")), logs.join("\n"));
  });

  test("close releases what it holds; holds after it reject", async () => {
    const { k } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const h = await k.hold(lease(), { holder: "a" });
    const releases = rest.count(":release");
    await k.close();
    assert.equal(h.state, "released");
    assert.equal(rest.count(":release"), releases + 1);
    await assert.rejects(k.hold(lease(), { holder: "a" }));
  });
});

describe("keeper, sessions", () => {
  test("held through a session on the keeper's clock: the deadline is the session's; an acked heartbeat moves it", async () => {
    const { k, clock, logs } = keeper(ses.url, {});
    const at = clock.now();
    const h = await k.hold(lease(), { holder: "a" });
    assert.equal(k.mode, "session");
    assert.equal(h.mode, "session");
    assert.equal(h.periodMs, 1000);
    assert.ok(logs.some((l) => l.startsWith("leasesvc keeper: holding through a session (window 1s)")), logs.join("\n"));
    assert.equal(h.deadline, at + 1000 * 0.9, "the session's heartbeats are sent on the keeper's clock");
    const before = h.deadline;
    clock.advance(100);
    const ev = await new Promise<HoldingEvent>((resolve) => {
      const off = h.onChange((e) => {
        if (e.kind !== "moved" || e.deadline <= before) return;
        off();
        resolve(e);
      });
    });
    assert.ok(ev.kind === "moved" && ev.deadline === at + 100 + 1000 * 0.9 && ev.confirmedAt === at + 100, JSON.stringify(ev));
    assert.equal(h.deadline, h.confirmedAt + 1000 * 0.9);
  });

  test("a keeper given a session takes its clock; one on another clock is refused", async () => {
    const c = client(ses.url);
    const s = await c.openSession({ windowMs: 1000, clock: new FakeClock() });
    cleanups.push(() => s.close());
    assert.equal(new Keeper(c, { session: s }).clock, s.clock);
    assert.throws(() => new Keeper(c, { session: s, clock: new FakeClock() }), RangeError);
  });

  test("a revoked push: lost with lease_lost; release then rejects and sends nothing", async () => {
    const { k } = keeper(ses.url, {});
    const name = lease();
    const h = await k.hold(name, { holder: "a" });
    const lost = next(h, "lost");
    ses.end(name, { type: "revoked", reason: "r", operator: "ops" });
    const ev = await lost;
    assert.ok(ev.kind === "lost" && ev.error instanceof LeaseLostError && ev.error.code === "lease_lost");
    const releases = ses.of("release").length;
    await assert.rejects(h.release(), LeaseError);
    assert.equal(ses.of("release").length, releases);
  });

  test("checkpoint, release and transfer go through the session and end the holding", async () => {
    const { k } = keeper(ses.url, {});
    const h = await k.hold(lease(), { holder: "a" });
    await h.renew({ n: 1 });
    assert.deepEqual(ses.of("renew").at(-1)!.msg["checkpoint"], { n: 1 });
    await h.release({ n: 2 });
    assert.equal(h.state, "released");
    assert.deepEqual(ses.of("release").at(-1)!.msg["checkpoint"], { n: 2 });
    const h2 = await k.hold(lease(), { holder: "a" });
    await h2.transfer("b");
    assert.equal(h2.state, "transferred");
    assert.equal(ses.of("transfer").at(-1)!.msg["to"], "b");
  });

  test("at the session limit (429 to open): plain renewals, and the log says why", async () => {
    ses.refuseOpen = 429;
    const { k, logs } = keeper(rest.url, { ttlMs: 3000, windowMs: 1000 });
    const h = await k.hold(lease(), { holder: "a" });
    assert.equal(k.mode, "plain");
    assert.equal(h.mode, "plain");
    assert.ok(logs.some((l) => l.startsWith("leasesvc keeper: plain renewals") && l.includes("session limit")), logs.join("\n"));
  });
});

describe("an Elector over a given keeper", () => {
  test("leads through it, releases on a graceful stop, and leaves the keeper open", async () => {
    const { k } = keeper(rest.url, { plainRenewals: true, ttlMs: 3000 });
    const name = lease();
    let led!: (token: number) => void;
    const leading = new Promise<number>((r) => (led = r));
    const e = new Elector(k, name, {
      holder: "a",
      callbacks: {
        onStartedLeading: (signal, token) =>
          new Promise<void>((resolve) => {
            led(token);
            signal.addEventListener("abort", () => resolve());
          }),
      },
    });
    const ac = new AbortController();
    const run = e.run(ac.signal);
    const token = await leading;
    assert.equal(k.mode, "plain");
    assert.equal(e.token, token);
    assert.equal(e.safeDeadline, e.lastSentAt + 3000 * 0.9);
    const releases = rest.count(":release");
    ac.abort();
    await run;
    assert.equal(rest.count(":release"), releases + 1);
    assert.equal(k.failed, undefined, "the keeper stays open");
    const h = await k.hold(name, { holder: "a" });
    assert.equal(h.token, token + 1);
  });
});
