/**
 * Sessions with operations in flight (docs/contract.md §14, round five;
 * issue 44), against the fake sessions route: A4 (an ack counts for a
 * holding only after its answer), A5 (a loss heard before its answer, held
 * already or not), A6 (a release or transfer ends the lead when sent), the
 * pushes of a new socket that come before its resumed, and the bound on
 * epochs and fencing tokens (2^53 − 1).
 */
import assert from "node:assert/strict";
import { after, afterEach, before, describe, mock, test } from "node:test";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { Client, type Holding, InternalError, InvalidArgumentError, Keeper, LeaseLostError, PermissionDeniedError, RateLimitedError, type Session } from "@leasesvc/client";
import { FakeSessionServer } from "./helpers/fakesession.js";

let fake: FakeSessionServer;
before(async () => {
  fake = await FakeSessionServer.start();
});
after(async () => {
  await fake.close();
});

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  fake.ack = "ack";
  fake.defer.clear();
  fake.deferred.length = 0;
  fake.leaseTtlMs = 30000;
  fake.openedEpoch = 0;
  fake.refuseLetGo = 0;
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

let seq = 0;
const lease = (): string => `inflight.${process.pid}.${++seq}`;
const client = (url = fake.url): Client => new Client(url, { requestTimeoutMs: 2000, backoff: { initialMs: 5, maxMs: 20 } });

async function open(c: Client): Promise<Session> {
  const s = await c.openSession({ windowMs: 1000, reconnectBackoff: { initialMs: 5, maxMs: 20 } });
  cleanups.push(() => s.close());
  return s;
}

function keeperOver(c: Client, s: Session): Keeper {
  const k = new Keeper(c, { session: s });
  cleanups.push(() => k.close());
  return k;
}

/** waitFor polls cond every few ms until it holds (timed on Date.now(): tests mock performance.now()). */
async function waitFor(what: string, cond: () => boolean, withinMs = 5000): Promise<void> {
  const until = Date.now() + withinMs;
  while (!cond()) {
    if (Date.now() > until) assert.fail("timed out waiting for " + what);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** turns lets every message already read and every continuation queued run. */
async function turns(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

/** track records how p settles. */
function track<T>(p: Promise<T>): { done: boolean; value?: T; err?: unknown } {
  const t: { done: boolean; value?: T; err?: unknown } = { done: false };
  p.then(
    (v) => Object.assign(t, { done: true, value: v }),
    (e: unknown) => Object.assign(t, { done: true, err: e }),
  );
  return t;
}

/** The id of the latest acquire of name the fake received. */
const acquireId = (name: string): number => fake.of("acquire").filter((r) => r.msg["name"] === name).at(-1)!.msg["id"] as number;

const beyond = 2 ** 53 + 2; // above Number.MAX_SAFE_INTEGER, and exactly representable: JSON carries it as written

describe("A4: acks after the answer", () => {
  test("an acquire answered later than its send time + leaseTtlMs × (1 − driftMargin) is not led on the acks that came before its answer; the first ack after it leads it (fake clock)", async () => {
    let now = 50_000;
    const clock = mock.method(performance, "now", () => now);
    try {
      fake.leaseTtlMs = 3000; // the bound: the acquire's send time + 2,700 ms
      const c = client();
      const s = await open(c);
      const k = keeperOver(c, s);
      const name = lease();
      fake.defer.add("acquire"); // the backend answers late
      const hold = track(k.hold(name, { holder: "a" }));
      await waitFor("the acquire", () => fake.of("acquire").some((r) => r.msg["name"] === name));
      const sentAt = now;
      // Heartbeats are acked meanwhile: the lease is not in the instance's table yet.
      now += 2800;
      await waitFor("an ack of a heartbeat sent now", () => s.lastAckSentAt === now);
      fake.ack = "none";
      fake.answerDeferred("acquire");
      await waitFor("the answer", () => s.heldToken(name, "a") > 0);
      await turns();
      const led = hold.value as Holding | undefined;
      assert.equal(hold.done, false, `led on acks that came before its answer, until ${led?.deadline} (past its bound ${sentAt + 2700}; the time is ${now})`);
      const token = s.heldToken(name, "a");
      assert.equal(s.holdingDeadline(name, token), sentAt + 2700, "before an ack after its answer: min(the session's deadline, send time + leaseTtlMs × 0.9)");
      assert.equal(s.holdingConfirmedAt(name, token), sentAt);
      assert.equal(s.deadline(), now + 900, "the session's own deadline is unchanged");

      now += 100;
      fake.ack = "ack";
      await waitFor("the hold", () => hold.done);
      assert.ok(hold.err === undefined, String(hold.err));
      const h = hold.value!;
      assert.equal(h.confirmedAt, now, "led from the heartbeat whose ack came after the answer");
      assert.equal(h.deadline, now + 900);
      assert.equal(s.holdingDeadline(name, h.token), s.deadline());
    } finally {
      clock.mock.restore();
    }
  });

  test("a holding answered in time is led from the session's deadline at once, and by its acks after", async () => {
    const c = client();
    const s = await open(c);
    const k = keeperOver(c, s);
    const h = await k.hold(lease(), { holder: "a" });
    assert.ok(h.deadline > performance.now());
    const moved = new Promise<void>((resolve) => {
      const off = h.onChange((ev) => {
        if (ev.kind !== "moved" || h.confirmedAt !== s.lastAckSentAt) return;
        off();
        resolve();
      });
    });
    await moved;
    assert.equal(h.deadline, s.deadline());
  });
});

describe("A5: a loss before its answer", () => {
  for (const push of [
    { type: "lost", reason: "taken" },
    { type: "revoked", reason: "incident", operator: "ops" },
  ]) {
    test(`the stub sends ${push.type} L/1, then result L/1, then acks: the hold rejects with LeaseLostError and nothing is led; a later acquire is not affected`, async () => {
      const c = client();
      const s = await open(c);
      const k = keeperOver(c, s);
      const name = lease();
      fake.defer.add("acquire");
      const hold = track(k.hold(name, { holder: "a" }));
      await waitFor("the acquire", () => fake.of("acquire").some((r) => r.msg["name"] === name));
      fake.push({ ...push, name, fencingToken: 1 }); // found between the lease entering the table and its answer
      fake.answerDeferred("acquire"); // result L/1; the fake goes on acking
      fake.defer.clear();
      await waitFor("the hold to settle", () => hold.done);
      assert.ok(hold.err instanceof LeaseLostError, `led after its ${push.type}: ${String(hold.err ?? (hold.value as Holding).deadline)}`);
      assert.match(String(hold.err), /before its answer/);
      assert.equal(s.heldToken(name, "a"), 0);
      assert.deepEqual(s.leases(), []);
      const beats = fake.of("heartbeat").length;
      await waitFor("an ack after the answer", () => fake.of("heartbeat").length > beats + 1);
      assert.deepEqual(s.leases(), [], "acks after it do not bring it back");

      // The memory went with the acquire: the next one is led.
      const again = await k.hold(name, { holder: "a" });
      assert.equal(again.token, 1);
      assert.equal(again.state, "held");
    });
  }

  test("a lost for another token than the result's is not held against it", async () => {
    const s = await open(client());
    const name = lease();
    fake.defer.add("acquire");
    const got = s.acquire(name, { holder: "a" });
    await waitFor("the acquire", () => fake.of("acquire").some((r) => r.msg["name"] === name));
    fake.push({ type: "lost", name, fencingToken: 7, reason: "taken" });
    fake.answerDeferred("acquire");
    const l = await got;
    assert.equal(l.fencingToken, 1);
    assert.equal(s.heldToken(name, "a"), 1);
  });

  test("a lost heard while a repeated acquire of a held lease is in flight: its result L/1 does not bring the holding back", async () => {
    const s = await open(client());
    const name = lease();
    assert.equal((await s.acquire(name, { holder: "a" })).fencingToken, 1);
    fake.defer.add("acquire");
    const again = track(s.acquire(name, { holder: "a" }));
    await waitFor("the repeated acquire", () => fake.of("acquire").filter((r) => r.msg["name"] === name).length === 2);
    fake.push({ type: "lost", name, fencingToken: 1, reason: "taken" });
    await waitFor("the lost", () => s.heldToken(name, "a") === 0);
    fake.answerDeferred("acquire"); // result L/1
    fake.defer.clear();
    await waitFor("the acquire to settle", () => again.done);
    assert.ok(again.err instanceof LeaseLostError, `led after its lost: ${String(again.err ?? JSON.stringify(again.value))}`);
    assert.equal(s.heldToken(name, "a"), 0);
    assert.deepEqual(s.leases(), [], "a later resume would claim it");
  });
});

describe("A6: letting go", () => {
  /** A session holding a lease, led by an ack after its answer. */
  async function holding(): Promise<{ s: Session; name: string }> {
    const s = await open(client());
    const name = lease();
    await s.acquire(name, { holder: "a" });
    const beats = fake.of("heartbeat").length;
    await waitFor("an ack after the answer", () => fake.of("heartbeat").length > beats + 1 && s.holdingDeadline(name, 1) > performance.now());
    return { s, name };
  }

  test("from the moment a release is sent the holding is not led, whatever the acks after", async () => {
    const { s, name } = await holding();
    fake.defer.add("release"); // under way, unanswered
    const sentBy = performance.now();
    const rel = track(s.release(name, "a", 1));
    await waitFor("the release", () => fake.deferred.some((d) => d.type === "release"));
    assert.ok(s.holdingDeadline(name, 1) <= sentBy, `led until ${s.holdingDeadline(name, 1)} after its release was sent at ${sentBy}`);
    const acked = s.lastAckSentAt;
    await waitFor("an ack after the release went out", () => s.lastAckSentAt > acked);
    assert.ok(s.holdingDeadline(name, 1) <= sentBy, "an ack brought the lead back");
    fake.answerDeferred("release");
    fake.defer.clear();
    await waitFor("the release to settle", () => rel.done);
    assert.ok(rel.err === undefined, String(rel.err));
  });

  for (const [status, type] of [[400, InvalidArgumentError], [403, PermissionDeniedError], [429, RateLimitedError]] as const) {
    test(`a release refused ${status} (nothing written) gives the lead back`, async () => {
      const { s, name } = await holding();
      fake.refuseLetGo = status;
      await assert.rejects(s.release(name, "a", 1), type);
      assert.ok(s.holdingDeadline(name, 1) > performance.now(), "not led after a refusal that wrote nothing");
      assert.equal(s.heldToken(name, "a"), 1);
    });
  }
});

describe("pushes on a new socket before its resumed", () => {
  test("are kept and applied in order once the resumed is: a lost ends its holding, a yield shows on its lease", async () => {
    const c = client();
    const s = await open(c);
    const k = keeperOver(c, s);
    const [n1, n2] = [lease(), lease()];
    const h1 = await k.hold(n1, { holder: "a" });
    const h2 = await k.hold(n2, { holder: "a" });
    const first = fake.lastSock;
    fake.defer.add("resume");
    fake.dropSock(first);
    await waitFor("the resume", () => fake.of("resume").some((r) => r.sock > first));
    const sock = fake.lastSock;
    fake.push({ type: "yield", name: n1, fencingToken: h1.token, to: "b" }, sock);
    fake.push({ type: "lost", name: n2, fencingToken: h2.token, reason: "taken" }, sock);
    fake.answerDeferred("resume", sock); // lists both as held
    await waitFor("the resumed", () => s.epoch === 2);
    assert.equal(h2.state, "lost", "the lost that came before the resumed was dropped");
    assert.equal(s.heldToken(n2, "a"), 0);
    assert.equal(h1.state, "held");
    assert.equal(h1.lease.yieldRequested, true);
    assert.equal(h1.lease.yieldTo, "b");
  });
});

describe("epochs and fencing tokens above 2^53 − 1", () => {
  test("a push carrying one is a protocol error: nothing in it is acted on, the socket is replaced, and the resume says what is held", async () => {
    const c = client();
    const s = await open(c);
    const k = keeperOver(c, s);
    const name = lease();
    const h = await k.hold(name, { holder: "a" });
    const sock = fake.lastSock;
    fake.push({ type: "lost", name, fencingToken: beyond, reason: "taken" }, sock);
    await waitFor("a resume on a new socket", () => fake.of("resume").some((r) => r.sock > sock), 3000);
    await waitFor("the old socket closed", () => fake.closedAt.has(sock));
    const resume = fake.of("resume").find((r) => r.sock > sock)!;
    assert.deepEqual(resume.msg["leases"], [{ name, holder: "a", fencingToken: h.token }]);
    await waitFor("the resumed", () => s.epoch === 2);
    assert.equal(h.state, "held");
  });

  test("a result carrying one fails its acquire with a clear error, leads nothing, and replaces the socket", async () => {
    const s = await open(client());
    const name = lease();
    fake.defer.add("acquire");
    const got = s.acquire(name, { holder: "a" });
    await waitFor("the acquire", () => fake.of("acquire").some((r) => r.msg["name"] === name));
    const sock = fake.lastSock;
    fake.push({ type: "result", re: acquireId(name), lease: { ...fake.leaseJSON(name), name, holder: "a", held: true, session: true, fencingToken: beyond } }, sock);
    await assert.rejects(got, (e: unknown) => e instanceof InternalError && /fencingToken 9007199254740994/.test(e.message) && /2\^53 − 1/.test(e.message));
    assert.equal(s.heldToken(name, "a"), 0);
    await waitFor("a resume on a new socket", () => fake.of("resume").some((r) => r.sock > sock), 3000);
  });

  test("an opened carrying an epoch above it fails the open; none is ever sent: a write with such a token is refused before it goes", async () => {
    fake.openedEpoch = beyond;
    await assert.rejects(client().openSession({ windowMs: 1000 }), (e: unknown) => e instanceof InternalError && /epoch 9007199254740994/.test(e.message));
    fake.openedEpoch = 0;

    const c = client();
    const s = await open(c);
    const name = lease();
    await s.acquire(name, { holder: "a" });
    const writes = (): number => fake.received.filter((r) => r.msg["type"] !== "heartbeat").length;
    const before = writes();
    await assert.rejects(s.renew(name, { holder: "a", fencingToken: 2 ** 53 }), RangeError);
    await assert.rejects(s.release(name, "a", 2 ** 53), RangeError);
    await assert.rejects(c.release(name, "a", 2 ** 53), RangeError); // REST: refused before the request too
    assert.equal(writes(), before, "nothing was sent");
  });

  test("a REST answer carrying one is an InternalError, not a lease", async (t) => {
    const server = createServer((_req, res) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ name: "x", holder: "h", fencingToken: beyond, held: true }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    t.after(() => new Promise((r) => server.close(r)));
    const c = new Client(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { maxAttempts: 1 });
    await assert.rejects(c.get("x"), (e: unknown) => e instanceof InternalError && /fencingToken 9007199254740994/.test(e.message));
  });
});
