/** Sessions (docs/contract.md §14) against a fake sessions route built on ws. */
import assert from "node:assert/strict";
import { after, afterEach, before, describe, mock, test } from "node:test";
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, writeFileSync } from "node:fs";
import { type IncomingMessage, createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { performance } from "node:perf_hooks";
import {
  Client,
  Elector,
  type ElectorOptions,
  type KeeperOptions,
  LeaseHeldError,
  LeaseLostError,
  SafeDeadlineError,
  type Session,
  SessionEndedError,
  SessionsUnsupportedError,
  silentMinMs,
  silentWindows,
  UnavailableError,
  YieldedError,
} from "@leasesvc/client";
import { WebSocket as WsWebSocket } from "ws";
import { FakeService } from "./helpers/fake.js";
import { packageDir } from "./helpers/service.js";
import { FakeSessionServer, type Received } from "./helpers/fakesession.js";

let fake: FakeSessionServer;
before(async () => {
  fake = await FakeSessionServer.start();
});
after(async () => {
  await fake.close();
});

/** Sessions and runs a test opened, closed after it whatever its outcome. */
const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  fake.ack = "ack";
  fake.refuseStatus = 0;
  fake.refuseOpen = 0;
  fake.refuseResume = 0;
  fake.defer.clear();
  fake.deferred.length = 0;
  fake.unavailableOn.clear();
  fake.conflicts.length = 0;
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

let seq = 0;
const lease = (): string => `ses.${process.pid}.${++seq}`;
const client = (url = fake.url): Client => new Client(url, { requestTimeoutMs: 2000, backoff: { initialMs: 5, maxMs: 20 } });

async function open(c: Client, windowMs = 1000): Promise<Session> {
  const s = await c.openSession({ windowMs, reconnectBackoff: { initialMs: 5, maxMs: 20 } });
  cleanups.push(() => s.close());
  return s;
}

/** waitFor polls cond every few ms until it holds (timed on Date.now(): tests mock performance.now()). */
async function waitFor(what: string, cond: () => boolean, withinMs = 10_000): Promise<void> {
  const until = Date.now() + withinMs;
  while (!cond()) {
    if (Date.now() > until) assert.fail("timed out waiting for " + what);
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** The first resume the fake received on a socket after sock. */
const resumeAfter = (sock: number): Received | undefined => fake.received.find((r) => r.msg["type"] === "resume" && r.sock > sock);

/** Settles p into a record of when it settled: the acquires the fake had received on socket sock by then, and the outcome. */
function track<T>(p: Promise<T>, sock: () => number): { done: boolean; acquiresThen: number; value?: T; err?: unknown } {
  const t: { done: boolean; acquiresThen: number; value?: T; err?: unknown } = { done: false, acquiresThen: -1 };
  p.then(
    (v) => Object.assign(t, { done: true, acquiresThen: fake.of("acquire", sock()).length, value: v }),
    (e: unknown) => Object.assign(t, { done: true, acquiresThen: fake.of("acquire", sock()).length, err: e }),
  );
  return t;
}

/** A term as a test sees it. */
interface Term {
  token: number;
  startedAt: number;
  endedAt?: number;
  reason?: unknown;
}

/** electorWithTerms records every term of an Elector (over a keeper of its own with ko: Elector.forClient) and its log lines, and stops it after the test. */
function elector(
  c: Client,
  name: string,
  ko: KeeperOptions = {},
  opts: Partial<Omit<ElectorOptions, "callbacks">> = {},
): { e: Elector; terms: Term[]; logs: string[]; ac: AbortController; run: Promise<void> } {
  const terms: Term[] = [];
  const logs: string[] = [];
  const e = Elector.forClient(
    c,
    name,
    {
      holder: "h-" + name,
      logger: { info: (m) => logs.push(m), warn: (m) => logs.push(m) },
      ...opts,
      callbacks: {
        onStartedLeading: (signal, token) =>
          new Promise<void>((resolve) => {
            const t: Term = { token, startedAt: performance.now() };
            terms.push(t);
            signal.addEventListener("abort", () => {
              t.endedAt = performance.now();
              t.reason = signal.reason;
              resolve();
            });
          }),
      },
    },
    { ttlMs: 3000, ...ko },
  );
  const ac = new AbortController();
  const run = e.run(ac.signal);
  cleanups.push(async () => {
    ac.abort();
    await run;
  });
  return { e, terms, logs, ac, run };
}

describe("Session", () => {
  test("the deadline is the send time of the last acknowledged heartbeat + window × (1 − driftMargin), on a fake clock and fake interval", async () => {
    let now = 1000;
    const clock = mock.method(performance, "now", () => now);
    mock.timers.enable({ apis: ["setInterval"] });
    try {
      const s = await client().openSession({ windowMs: 1000, driftMargin: 0.1 });
      cleanups.push(() => s.close());
      const sock = fake.lastSock;
      assert.equal(s.heartbeatMs, 250);
      assert.equal(s.lastAckSentAt, 1000);
      assert.equal(s.deadline(), 1000 + 900);

      // The next heartbeat goes a heartbeatMs later, not before.
      const beats = (): number => fake.of("heartbeat", sock).length;
      const before = beats();
      mock.timers.tick(249);
      assert.equal(beats(), before);
      // Not acknowledged: the deadline stays.
      fake.ack = "none";
      now = 2000;
      mock.timers.tick(1);
      await waitFor("a heartbeat", () => beats() === before + 1);
      assert.equal(s.deadline(), 1900);
      // Acknowledged: it moves to that heartbeat's send time.
      fake.ack = "hold";
      now = 3000;
      mock.timers.tick(250);
      now = 3100;
      mock.timers.tick(250);
      await waitFor("two held heartbeats", () => fake.held.length === 2);
      const [first, second] = fake.held.map((h) => h.id);
      fake.ackHeld([second!]);
      await waitFor("the deadline to move", () => s.deadline() === 3100 + 900);
      // A late ack of an earlier heartbeat never moves it back.
      fake.ackHeld([first!]);
      fake.ack = "ack";
      now = 3500;
      mock.timers.tick(250);
      await waitFor("the next ack", () => s.deadline() === 3500 + 900);
    } finally {
      mock.timers.reset();
      clock.mock.restore();
    }
  });

  test("open sends the window, the subprotocol and the credentials; a window out of range is refused before connecting", async () => {
    const c = new Client(fake.url, { token: "tok-123" });
    const s = await c.openSession({ windowMs: 400 });
    cleanups.push(() => s.close());
    const opened = fake.of("open").at(-1)!;
    assert.equal(opened.msg["windowMs"], 400);
    assert.equal(fake.upgrades.at(-1)!["authorization"], "Bearer tok-123");
    assert.equal(fake.upgrades.at(-1)!["sec-websocket-protocol"], "leasesvc.session.v2");
    assert.equal(s.windowMs, 400);
    assert.equal(s.epoch, 1);
    await assert.rejects(c.openSession({ windowMs: 100 }), RangeError);
    await assert.rejects(c.openSession({ windowMs: 60_001 }), RangeError);
  });

  test("acquire, renew, release and transfer travel over the socket; refusals are the Client's errors", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a", metadata: { k: 1 }, waitMs: 100, priority: 3 });
    assert.equal(l.holder, "a");
    assert.equal(l.session, true);
    assert.equal(l.sessionWindowMs, 1000);
    const acq = fake.of("acquire").at(-1)!.msg;
    assert.deepEqual([acq["name"], acq["holder"], acq["metadata"], acq["waitMs"], acq["priority"], "ttlMs" in acq], [name, "a", { k: 1 }, 100, 3, false]);
    assert.deepEqual(s.leases(), [name]);
    assert.equal(s.heldToken(name, "a"), l.fencingToken);

    const s2 = await open(client());
    const held = await s2.acquire(name, { holder: "b" }).catch((e: unknown) => e);
    assert.ok(held instanceof LeaseHeldError, String(held));
    assert.equal(held.lease.holder, "a");

    const r = await s.renew(name, { holder: "a", fencingToken: l.fencingToken, checkpoint: { step: 2 } });
    assert.deepEqual(r.checkpoint, { step: 2 });
    await assert.rejects(s.renew(name, { holder: "a", fencingToken: l.fencingToken + 5 }), LeaseLostError);
    await s.release(name, "a", l.fencingToken, { checkpoint: { step: 3 } });
    assert.deepEqual(fake.of("release").at(-1)!.msg["checkpoint"], { step: 3 });
    assert.deepEqual(s.leases(), []);

    const t = await s.acquire(name, { holder: "a" });
    await s.transfer(name, { holder: "a", fencingToken: t.fencingToken, to: "b", reserveMs: 2000, toPrincipal: "p" });
    const tr = fake.of("transfer").at(-1)!.msg;
    assert.deepEqual([tr["to"], tr["reserveMs"], tr["toPrincipal"]], ["b", 2000, "p"]);
    assert.deepEqual(s.leases(), []);
  });

  test("a dropped socket is reconnected and resumed with the session id and the leases held", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const first = fake.lastSock;
    const opened = fake.of("open", first).at(-1)!;
    fake.drop();
    await waitFor("a resume", () => fake.of("resume").length > 0 && s.connected && s.epoch === 2);
    const resume = fake.of("resume").at(-1)!;
    assert.notEqual(resume.sock, first);
    assert.equal(resume.msg["sessionId"], fake.sessions.values().next().value?.id ?? resume.msg["sessionId"]);
    assert.deepEqual(resume.msg["leases"], [{ name, holder: "a", fencingToken: l.fencingToken }]);
    assert.ok((resume.msg["id"] as number) > (opened.msg["id"] as number), "ids keep increasing");
    const acked = s.lastAckSentAt;
    await waitFor("an ack on the new socket", () => s.lastAckSentAt > acked);
    assert.deepEqual(s.leases(), [name]);
  });

  test("a lease another took while the socket was down is reported lost by the resume", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const lost: unknown[] = [];
    s.watchHolding(name, { token: l.fencingToken, lost: (e) => lost.push(e), yieldTo() {}, acked() {} });
    fake.leases.set(name, { holder: "other", token: l.fencingToken + 1, session: "elsewhere", checkpoint: null });
    fake.drop();
    await waitFor("the lost report", () => lost.length === 1);
    assert.ok(lost[0] instanceof LeaseLostError);
    assert.deepEqual(s.leases(), []);
  });

  test("a yield request is kept for a holding no term listens to yet, and read from a resume's leases", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    fake.push({ type: "yield", name, fencingToken: l.fencingToken, to: "early" });
    // The answer to a request sent after the push comes after it on the socket: the push was read.
    await s.renew(name, { holder: "a", fencingToken: l.fencingToken });
    const heard: string[] = [];
    // Sent before anyone listened: the next watcher hears it.
    s.watchHolding(name, { token: l.fencingToken, lost() {}, yieldTo: (to) => heard.push(to), acked() {} });
    await waitFor("the kept request", () => heard.length === 1);
    assert.deepEqual(heard, ["early"]);

    const other = lease();
    const o = await s.acquire(other, { holder: "a" });
    const heard2: string[] = [];
    s.watchHolding(other, { token: o.fencingToken, lost() {}, yieldTo: (to) => heard2.push(to), acked() {} });
    // The push went to a socket that dropped: the resume's lease says it.
    fake.leases.get(other)!.yieldTo = "late";
    fake.drop();
    await waitFor("the request from the resume", () => heard2.length === 1);
    assert.deepEqual(heard2, ["late"]);
  });

  test("move: the new socket resumes before the old one is closed, without a close message", async () => {
    const s = await open(client());
    const name = lease();
    await s.acquire(name, { holder: "a" });
    const old = fake.lastSock;
    fake.push({ type: "move", reason: "shutdown" }, old);
    await waitFor("the old socket to close", () => fake.closedAt.has(old));
    const resume = fake.received.findIndex((r) => r.msg["type"] === "resume" && r.sock !== old);
    assert.ok(resume >= 0, "resumed on a new socket");
    assert.ok(fake.closedAt.get(old)! > resume, "the old socket closed only after the resume");
    assert.equal(fake.of("close", old).length, 0, "no close message on the old socket");
    assert.equal(s.epoch, 2);
    const acked = s.lastAckSentAt;
    await waitFor("heartbeats on the new socket", () => s.lastAckSentAt > acked);
    assert.ok(fake.of("heartbeat").at(-1)!.sock !== old);
  });

  // The resume race (docs/contract.md §14, Resume): a resume's new instance claims only the
  // holdings the resume listed, and the old instance answers and acks until it finds out.

  test("an acquire answered on the old socket while a resume is out is not led: it is acquired again through the resumed socket (resumes are counted when their leases are listed)", async () => {
    const s = await open(client(), 5000);
    const name = lease();
    const old = fake.lastSock;
    fake.defer.add("acquire").add("resume");
    let next = 0;
    const got = track(s.acquire(name, { holder: "a", waitMs: 500 }), () => next);
    await waitFor("the acquire on the old socket", () => fake.of("acquire", old).length === 1);
    fake.push({ type: "move", reason: "shutdown" }, old);
    await waitFor("the resume on a new socket", () => resumeAfter(old) !== undefined);
    const resume = resumeAfter(old)!;
    next = resume.sock;
    assert.deepEqual(resume.msg["leases"], [], "listed before the acquire was answered");
    // The old instance answers the acquire after the resume went out, before it is answered.
    fake.defer.delete("acquire");
    fake.answerDeferred("acquire", old);
    await waitFor("the holding in the session's table (a later resume lists it)", () => s.heldToken(name, "a") > 0);
    assert.equal(got.done, false, "led on an answer the resume in flight did not claim");
    assert.equal(fake.of("acquire", next).length, 0, "nothing sent on the new socket before its resume is answered");
    fake.defer.delete("resume");
    fake.answerDeferred("resume", next);
    await waitFor("the acquire to return", () => got.done);
    assert.equal(got.err, undefined, String(got.err));
    assert.equal(got.acquiresThen, 1, "returned only after acquiring it again through the resumed socket");
    const again = fake.of("acquire", next)[0]!.msg;
    assert.equal(again["holder"], "a");
    assert.equal(again["waitMs"], undefined, "acquired again without waiting");
    assert.equal(got.value!.fencingToken, s.heldToken(name, "a"));
    assert.equal(s.epoch, 2);
  });

  test("an acquire answered on the old socket after the move resumed is acquired again through the new socket before it is returned; given up at the caller's timeout, it is released", async () => {
    const s = await open(client(), 5000);
    const name = lease();
    const old = fake.lastSock;
    fake.defer.add("acquire");
    let next = 0;
    const got = track(s.acquire(name, { holder: "a" }), () => next);
    await waitFor("the acquire on the old socket", () => fake.of("acquire", old).length === 1);
    fake.push({ type: "move", reason: "max_age" }, old);
    await waitFor("moved", () => s.epoch === 2);
    next = resumeAfter(old)!.sock;
    fake.defer.delete("acquire");
    // The old instance, which does not know yet that it lost the session, answers.
    fake.answerDeferred("acquire", old);
    await waitFor("the acquire to return", () => got.done);
    assert.equal(got.err, undefined, String(got.err));
    assert.equal(got.acquiresThen, 1, "returned only after acquiring it again through the new socket");
    assert.equal(got.value!.holder, "a");

    // The second answer never comes: the caller's timeout ends the call and the holding is let go.
    const other = lease();
    const old2 = next;
    fake.defer.add("acquire");
    const lost = track(s.acquire(other, { holder: "a" }, { timeoutMs: 3000 }), () => next);
    await waitFor("the acquire on the socket", () => fake.of("acquire", old2).some((r) => r.msg["name"] === other));
    fake.push({ type: "move", reason: "max_age" }, old2);
    await waitFor("moved again", () => s.epoch === 3);
    next = resumeAfter(old2)!.sock;
    fake.answerDeferred("acquire", old2);
    await waitFor("the call to fail", () => lost.done);
    assert.ok(lost.err instanceof UnavailableError, String(lost.err));
    assert.equal(fake.of("acquire", next).length, 1, "acquired again through the new socket");
    await waitFor("the release", () => fake.of("release", next).some((r) => r.msg["name"] === other));
    assert.equal(s.heldToken(other, "a"), 0);
  });

  test("no heartbeat goes on the old socket once a resume went out, so its acks cannot move the deadline past the resume", async () => {
    const s = await open(client());
    const old = fake.lastSock;
    fake.defer.add("resume"); // never answered: the old instance keeps acking what it gets
    fake.push({ type: "move", reason: "shutdown" }, old);
    await waitFor("the resume on a new socket", () => resumeAfter(old) !== undefined);
    const resume = resumeAfter(old)!;
    // The resume times out after the request timeout (2 s, 8 heartbeats of a 1 s window).
    await waitFor("the resume to time out", () => fake.closedAt.has(resume.sock));
    // Ids increase in the order the session sends: none of the old socket's heartbeats after the resume.
    const late = fake.of("heartbeat", old).filter((r) => (r.msg["id"] as number) > (resume.msg["id"] as number));
    assert.deepEqual(late, [], "heartbeats sent on the old socket after the resume");
    // The fake received the resume after it was sent: the deadline lies before its receipt + window × (1 − margin).
    assert.ok(s.deadline() <= resume.at + 1000 * (1 - s.driftMargin), `deadline ${s.deadline()} past the resume at ${resume.at} + 900 ms`);
  });

  test("a resume that fails after it was sent (no answer, an error answer) gives the old socket up and resumes again; a dial that fails keeps it", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    for (const how of ["an error answer", "no answer"]) {
      const old = fake.lastSock;
      if (how === "no answer") fake.defer.add("resume");
      else fake.refuseResume = 503;
      const epoch = s.epoch;
      fake.push({ type: "move", reason: "shutdown" }, old);
      await waitFor(`the resume on a new socket (${how})`, () => resumeAfter(old) !== undefined);
      const resume = resumeAfter(old)!;
      await waitFor(`the old socket closed (${how})`, () => fake.closedAt.has(old));
      assert.equal(fake.of("close", old).length, 0, "given up without close: the session lives on");
      const late = fake.of("heartbeat", old).filter((r) => (r.msg["id"] as number) > (resume.msg["id"] as number));
      assert.deepEqual(late, [], `heartbeats sent on the old socket after the resume (${how})`);
      assert.ok(s.deadline() <= resume.at + 1000 * (1 - s.driftMargin), `deadline moved past the resume (${how})`);
      fake.defer.clear();
      fake.refuseResume = 0;
      // The failed resume's epoch counts as proposed (A1): the next one proposes more.
      await waitFor(`resumed again (${how})`, () => s.epoch > epoch + 1 && s.connected);
      const last = fake.of("resume").at(-1)!;
      assert.equal(last.msg["epoch"], s.epoch);
      assert.deepEqual(last.msg["leases"], [{ name, holder: "a", fencingToken: l.fencingToken }]);
      const acked = s.lastAckSentAt;
      await waitFor(`an ack on the resumed socket (${how})`, () => s.lastAckSentAt > acked);
    }

    // The dial fails: nothing was sent, the old socket goes on heartbeating meanwhile.
    const old = fake.lastSock;
    const upgrades = fake.upgrades.length;
    fake.refuseStatus = 503;
    fake.push({ type: "move", reason: "shutdown" }, old);
    await waitFor("a refused dial", () => fake.upgrades.length > upgrades);
    const beats = fake.of("heartbeat", old).length;
    const acked = s.lastAckSentAt;
    await waitFor("heartbeats acked on the old socket", () => fake.of("heartbeat", old).length > beats && s.lastAckSentAt > acked);
    assert.equal(fake.closedAt.has(old), false);
    fake.refuseStatus = 0;
    await waitFor("moved", () => fake.closedAt.has(old) && s.connected);
  });

  test("a session the service forgot ends: its holdings are told, calls throw SessionEndedError", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const lost: unknown[] = [];
    s.watchHolding(name, { token: l.fencingToken, lost: (e) => lost.push(e), yieldTo() {}, acked() {} });
    fake.forgetSessions();
    fake.drop();
    await waitFor("the end", () => s.ended);
    assert.ok(lost[0] instanceof SessionEndedError, String(lost[0]));
    await assert.rejects(s.acquire(name, { holder: "a" }), SessionEndedError);
  });

  test("close tells the holdings first, then sends close; the service releases the leases", async () => {
    const s = await client().openSession();
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const closes = fake.of("close").length;
    let lostBeforeClose = false;
    s.watchHolding(name, { token: l.fencingToken, lost: () => (lostBeforeClose = fake.of("close").length === closes), yieldTo() {}, acked() {} });
    await s.close();
    assert.ok(lostBeforeClose);
    assert.equal(fake.of("close").length, closes + 1);
    assert.equal(fake.leases.get(name)!.session, "");
    assert.ok(s.ended);
  });

  test("a service without sessions: 404, 405 and 501 on the upgrade throw SessionsUnsupportedError; 503 is UnavailableError", async () => {
    for (const status of [404, 405, 501]) {
      fake.refuseStatus = status;
      const err = await client().openSession().catch((e: unknown) => e);
      assert.ok(err instanceof SessionsUnsupportedError, `${status}: ${String(err)}`);
      assert.equal(err.status, status);
    }
    fake.refuseStatus = 503;
    const err = await client().openSession().catch((e: unknown) => e);
    assert.ok(!(err instanceof SessionsUnsupportedError) && err instanceof Error && (err as { status?: number }).status === 503, String(err));
  });
});

// Every owner, in order (docs/contract.md §14): A1 ordered resumes, A2 one current socket, A3 a
// silent socket is replaced, a conflict resumes higher, and step 6 for releases and transfers.
describe("Session: every owner, in order", () => {
  const holding = (name: string, token: number): Array<Record<string, unknown>> => [{ name, holder: "a", fencingToken: token }];

  test("A1: each resume proposes one above every epoch seen or proposed, recorded before it is sent: a resume begun while one is unanswered proposes more, and the late one is refused", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const first = fake.lastSock;
    fake.defer.add("resume");
    fake.dropSock(first);
    await waitFor("the first resume", () => resumeAfter(first) !== undefined);
    const r1 = resumeAfter(first)!;
    assert.equal(r1.msg["epoch"], 2, "one above the opened epoch");
    // Its socket drops unanswered: the next resume goes while that one may still reach the service.
    fake.defer.delete("resume");
    fake.dropSock(r1.sock);
    await waitFor("resumed again", () => s.connected && s.epoch === 3);
    const r2 = resumeAfter(r1.sock)!;
    assert.equal(r2.msg["epoch"], 3, "above the epoch the unanswered resume proposed");
    assert.deepEqual(r2.msg["leases"], holding(name, l.fencingToken));
    // The first resume reaches the service late: refused, the session stays at the later epoch.
    fake.answerDeferred("resume", r1.sock);
    assert.deepEqual(fake.conflicts, [2]);
    assert.equal([...fake.sessions.values()].find((x) => x.sock === r2.sock)?.epoch, 3);
  });

  test("A2: once a resume went out on a new socket, the old socket is retired: its lost, revoked, yield and move pushes are ignored and its acks count for nothing; the resume says what is held", async () => {
    const s = await open(new Client(fake.url, { requestTimeoutMs: 10_000, backoff: { initialMs: 5, maxMs: 20 } }));
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const heard: string[] = [];
    const acks: number[] = [];
    s.watchHolding(name, { token: l.fencingToken, lost: (e) => heard.push(`lost: ${e.message}`), yieldTo: (to) => heard.push(`yield to ${to}`), acked: (at) => acks.push(at) });
    const old = fake.lastSock;
    // A request answered on the old socket after everything else marks what came before it read.
    fake.defer.add("renew");
    const renewed = s.renew(name, { holder: "a", fencingToken: l.fencingToken });
    await waitFor("the renew on the old socket", () => fake.of("renew", old).length === 1);
    fake.ack = "hold";
    await waitFor("a heartbeat held on the old socket", () => fake.held.some((h) => h.sock === old));
    fake.defer.add("resume");
    fake.push({ type: "move", reason: "shutdown" }, old);
    await waitFor("the resume on a new socket", () => resumeAfter(old) !== undefined);
    const next = resumeAfter(old)!.sock;
    // Every ack sent before the move push has been read: the deadline as the resume went out.
    const acked = s.lastAckSentAt;
    const deadline = s.deadline();
    const acksThen = acks.length;
    const upgrades = fake.upgrades.length;
    fake.push({ type: "yield", name, fencingToken: l.fencingToken, to: "other" }, old);
    fake.push({ type: "lost", name, fencingToken: l.fencingToken, reason: "taken" }, old);
    fake.push({ type: "revoked", name, fencingToken: l.fencingToken, reason: "r", operator: "ops" }, old);
    fake.push({ type: "move", reason: "max_age" }, old);
    // The acks of heartbeats sent before the resume: they count for nothing either.
    fake.ackHeld();
    fake.defer.delete("renew");
    fake.answerDeferred("renew", old);
    await renewed;
    assert.deepEqual(heard, [], "pushes of the retired socket");
    assert.equal(s.heldToken(name, "a"), l.fencingToken);
    assert.equal(s.lastAckSentAt, acked, "an ack of the retired socket counted");
    assert.equal(s.deadline(), deadline);
    assert.equal(acks.length, acksThen, "an ack of the retired socket reached the watcher");
    fake.ack = "ack";
    fake.defer.delete("resume");
    fake.answerDeferred("resume", next);
    await waitFor("resumed", () => s.connected && s.epoch === 2);
    assert.deepEqual(heard, []);
    assert.equal(s.heldToken(name, "a"), l.fencingToken);
    assert.equal(fake.upgrades.length, upgrades, "the retired socket's move started no resume");
    await waitFor("the resumed socket's acks to lead", () => s.lastAckSentAt > acked);
  });

  test("A2: the ack of a heartbeat sent before the resume, arriving on the retired socket after its lost push, moves neither the deadline nor the holding (fake clock)", async () => {
    let now = 1000;
    const clock = mock.method(performance, "now", () => now);
    mock.timers.enable({ apis: ["setInterval"] });
    try {
      const s = await open(new Client(fake.url, { requestTimeoutMs: 10_000, backoff: { initialMs: 5, maxMs: 20 } }), 1000);
      const name = lease();
      const l = await s.acquire(name, { holder: "a" });
      const old = fake.lastSock;
      const heard: string[] = [];
      const acks: number[] = [];
      s.watchHolding(name, { token: l.fencingToken, lost: (e) => heard.push(`lost: ${e.message}`), yieldTo: (to) => heard.push(`yield to ${to}`), acked: (at) => acks.push(at) });
      assert.equal(s.deadline(), 1000 + 900);
      // A heartbeat goes on socket A at 2000; its instance, cut off from the backend, does not ack it yet.
      fake.ack = "hold";
      now = 2000;
      mock.timers.tick(250);
      await waitFor("the heartbeat held on socket A", () => fake.held.some((h) => h.sock === old));
      // A request answered on socket A after the rest marks what came before it read.
      fake.defer.add("renew");
      const renewed = s.renew(name, { holder: "a", fencingToken: l.fencingToken });
      await waitFor("the renew on socket A", () => fake.of("renew", old).length === 1);
      // At 3000 a resume goes out on socket B: A is retired.
      fake.defer.add("resume");
      now = 3000;
      fake.push({ type: "move", reason: "shutdown" }, old);
      await waitFor("the resume on socket B", () => resumeAfter(old) !== undefined);
      const next = resumeAfter(old)!.sock;
      // A's instance saw the session's leases run out and another holder take this one:
      // it pushes lost, then acks the heartbeat sent at 2000 (before the resume).
      fake.push({ type: "lost", name, fencingToken: l.fencingToken, reason: "expired" }, old);
      fake.ackHeld();
      fake.defer.delete("renew");
      fake.answerDeferred("renew", old);
      await renewed;
      assert.deepEqual(heard, [], "the retired socket's lost push is ignored: the resume says what is held");
      assert.equal(s.lastAckSentAt, 1000, "the retired socket's ack of the heartbeat sent at 2000 counted");
      assert.equal(s.deadline(), 1000 + 900, "the deadline moved on the retired socket's ack");
      assert.deepEqual(acks, [], "the retired socket's ack reached the watcher");
      // The resume says what is held: another holder has the lease now.
      fake.leases.set(name, { holder: "b", token: l.fencingToken + 1, session: "", checkpoint: null });
      fake.ack = "ack";
      fake.defer.delete("resume");
      fake.answerDeferred("resume", next);
      await waitFor("resumed", () => s.connected && s.epoch === 2);
      assert.equal(heard.length, 1, heard.join("; "));
      assert.match(heard[0]!, /lost while resuming/);
      assert.equal(s.heldToken(name, "a"), 0);
      // Socket B is current: its acks lead.
      await waitFor("socket B's first ack", () => s.lastAckSentAt === 3000);
      assert.equal(s.deadline(), 3000 + 900);
    } finally {
      mock.timers.reset();
      clock.mock.restore();
    }
  });

  test("A3: a socket on which nothing arrived for 4 windows (at least 5 s) while heartbeats went out is closed without close and the session resumes on a new one (fake clock)", async () => {
    let now = 1000;
    const clock = mock.method(performance, "now", () => now);
    mock.timers.enable({ apis: ["setInterval"] });
    try {
      const s = await open(client(), 1000);
      const name = lease();
      const l = await s.acquire(name, { holder: "a" });
      const old = fake.lastSock;
      const beats = (): number => fake.of("heartbeat", old).length;
      const b0 = beats();
      const resumes = fake.of("resume").length;
      fake.ack = "none"; // a paused instance: nothing arrives any more
      now = 2000;
      mock.timers.tick(250);
      await waitFor("an unanswered heartbeat", () => beats() === b0 + 1);
      // 4 windows are 4 s: the 5 s floor applies. Just short of it after that heartbeat: heartbeats go on.
      const silent = Math.max(silentWindows * 1000, silentMinMs);
      assert.deepEqual([silentWindows, silentMinMs, silent], [4, 5000, 5000]);
      now = 2000 + silent - 1;
      mock.timers.tick(250);
      await waitFor("the next heartbeat", () => beats() === b0 + 2);
      assert.ok(s.connected);
      assert.equal(fake.of("resume").length, resumes);
      now = 2000 + silent;
      mock.timers.tick(250);
      await waitFor("a resume on a new socket", () => s.connected && s.epoch === 2);
      assert.deepEqual(resumeAfter(old)!.msg["leases"], holding(name, l.fencingToken));
      assert.equal(beats(), b0 + 2, "no heartbeat on the silent socket once given up");
      await waitFor("the silent socket closed", () => fake.closedAt.has(old));
      assert.equal(fake.of("close", old).length, 0, "closed without close: the session lives on");
    } finally {
      mock.timers.reset();
      clock.mock.restore();
    }
  });

  test("a resume answered 409 session_conflict resumes again on a new socket, proposing above the epoch the conflict names; the holdings stay", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const first = fake.lastSock;
    // The service's record is at 7 (a duplicated resume frame took it there, say).
    [...fake.sessions.values()].find((x) => x.sock === first)!.epoch = 7;
    fake.dropSock(first);
    await waitFor("resumed", () => s.connected && s.epoch > 7);
    const resumes = fake.received.filter((r) => r.msg["type"] === "resume" && r.sock > first);
    assert.deepEqual(
      resumes.map((r) => r.msg["epoch"]),
      [2, 8],
    );
    assert.deepEqual(fake.conflicts, [2]);
    assert.notEqual(resumes[1]!.sock, resumes[0]!.sock, "on a new socket");
    assert.deepEqual(resumes[1]!.msg["leases"], holding(name, l.fencingToken));
    assert.equal(s.ended, false);
    assert.equal(s.epoch, 8);
    assert.equal(s.heldToken(name, "a"), l.fencingToken);
  });

  test("step 6: a release whose socket dropped before the answer stays in the table, the resume claims it and it goes again through the resumed socket; one the resume reports lost throws LeaseLostError", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const first = fake.lastSock;
    fake.defer.add("release");
    const rel = track(s.release(name, "a", l.fencingToken, { checkpoint: { n: 1 } }), () => 0);
    await waitFor("the release on the socket", () => fake.of("release", first).length === 1);
    fake.defer.delete("release");
    fake.dropSock(first);
    await waitFor("the release to settle", () => rel.done);
    assert.equal(rel.err, undefined, String(rel.err));
    const resume = resumeAfter(first)!;
    assert.deepEqual(resume.msg["leases"], holding(name, l.fencingToken), "the resume claims the holding");
    const again = fake.of("release", resume.sock);
    assert.equal(again.length, 1, "sent again through the resumed socket");
    assert.deepEqual(again[0]!.msg["checkpoint"], { n: 1 });
    assert.equal(rel.value!.held, false);
    assert.equal(fake.leases.get(name)!.session, "");
    assert.deepEqual(s.leases(), []);

    // Taken by another while the socket was down: the resume reports it lost, nothing is sent again.
    const other = lease();
    const o = await s.acquire(other, { holder: "a" });
    const sock = fake.lastSock;
    fake.defer.add("release");
    const rel2 = track(s.release(other, "a", o.fencingToken), () => 0);
    await waitFor("the second release on the socket", () => fake.of("release", sock).some((r) => r.msg["name"] === other));
    fake.defer.delete("release");
    fake.leases.set(other, { holder: "b", token: o.fencingToken + 1, session: "elsewhere", checkpoint: null });
    fake.dropSock(sock);
    await waitFor("the second release to settle", () => rel2.done);
    assert.ok(rel2.err instanceof LeaseLostError, String(rel2.err));
    assert.equal(fake.of("release").filter((r) => r.msg["name"] === other).length, 1, "not sent again");
    assert.deepEqual(s.leases(), []);
  });

  test("step 6: a transfer answered 503 unavailable (the session ended on its socket while it was under way) goes again through the resumed socket, which claimed the holding", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const first = fake.lastSock;
    fake.unavailableOn.add(first); // answers 503, then closes the socket
    const t = await s.transfer(name, { holder: "a", fencingToken: l.fencingToken, to: "b", reserveMs: 1000 });
    assert.equal(fake.of("transfer", first).length, 1);
    const resume = resumeAfter(first)!;
    assert.deepEqual(resume.msg["leases"], holding(name, l.fencingToken), "the resume claims the holding");
    const again = fake.of("transfer", resume.sock);
    assert.equal(again.length, 1, "sent again through the resumed socket");
    assert.deepEqual([again[0]!.msg["to"], again[0]!.msg["reserveMs"]], ["b", 1000]);
    assert.equal(t.held, false);
    assert.deepEqual(s.leases(), []);
  });

  test("step 6: a release answered on the old socket after a resume that listed the holding goes again through the resumed socket (that resume may have claimed it anew); its lease_lost keeps the first answer", async () => {
    const s = await open(client());
    const name = lease();
    const l = await s.acquire(name, { holder: "a" });
    const old = fake.lastSock;
    fake.defer.add("release");
    const rel = track(s.release(name, "a", l.fencingToken), () => 0);
    await waitFor("the release on the old socket", () => fake.of("release", old).length === 1);
    fake.push({ type: "move", reason: "shutdown" }, old);
    await waitFor("moved", () => s.connected && s.epoch === 2);
    const next = resumeAfter(old)!;
    assert.deepEqual(next.msg["leases"], holding(name, l.fencingToken));
    fake.defer.delete("release");
    fake.answerDeferred("release", old);
    await waitFor("the release to settle", () => rel.done);
    assert.equal(rel.err, undefined, String(rel.err));
    assert.equal(fake.of("release", next.sock).length, 1, "sent again through the resumed socket");
    assert.equal(rel.value!.held, false);
    assert.deepEqual(s.leases(), []);
  });
});

describe("the runtime's WebSocket", () => {
  test("globalThis.WebSocket (Node 22, Deno, Bun) is used when present, with the credentials; a refused upgrade is explained by a plain GET", async () => {
    const made: Array<{ url: string; init: unknown }> = [];
    /** A WHATWG-style WebSocket (url, { protocols, headers }) made of ws's, as Node 22's takes it. */
    class GlobalLike extends WsWebSocket {
      constructor(url: string, init: { protocols: string[]; headers: Record<string, string> }) {
        super(url, init.protocols, { headers: init.headers });
        made.push({ url, init });
      }
    }
    const g = globalThis as { WebSocket?: unknown };
    const saved = g.WebSocket;
    g.WebSocket = GlobalLike;
    try {
      const s = await new Client(fake.url, { token: "tok-g" }).openSession();
      cleanups.push(() => s.close());
      assert.equal(made.length, 1);
      assert.equal(made[0]!.url, fake.url.replace("http", "ws") + "/v1/sessions:connect");
      assert.equal(fake.upgrades.at(-1)!["authorization"], "Bearer tok-g");
      const name = lease();
      assert.equal((await s.acquire(name, { holder: "a" })).holder, "a");
      fake.refuseStatus = 404;
      const err = await client().openSession().catch((e: unknown) => e);
      assert.ok(err instanceof SessionsUnsupportedError, String(err));
    } finally {
      g.WebSocket = saved;
    }
  });
});

describe("a runtime without WebSocket", () => {
  test("neither globalThis.WebSocket nor the ws package: openSession throws SessionsUnsupportedError and the Elector uses plain renewals", async () => {
    const rest = await FakeService.start();
    cleanups.push(() => rest.close());
    // The built package alone, where no node_modules (so no ws) can be found.
    const dir = mkdtempSync(join(tmpdir(), "leasesvc-ts-nows-"));
    cpSync(join(packageDir, "dist"), join(dir, "dist"), { recursive: true });
    writeFileSync(join(dir, "package.json"), '{"type":"module"}\n');
    writeFileSync(
      join(dir, "check.js"),
      `delete globalThis.WebSocket;
import { Client, Elector, SessionsUnsupportedError } from "./dist/index.js";
const c = new Client(process.argv[2]);
const err = await c.openSession().catch((e) => e);
console.log(JSON.stringify({ unsupported: err instanceof SessionsUnsupportedError, message: String(err.message) }));
const e = Elector.forClient(c, "nows.a", {
  holder: "h",
  logger: { info: (m, f) => console.log(JSON.stringify({ log: m, why: f?.why })), warn() {} },
  callbacks: { onStartedLeading: async () => { console.log(JSON.stringify({ leading: true })); process.exit(0); } },
}, { ttlMs: 900 });
await e.run();
`,
    );
    const out = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [join(dir, "check.js"), rest.url], { timeout: 30_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${String(err)}\n${stderr}`)) : resolve(stdout))),
    );
    const lines = out.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.equal(lines[0]!["unsupported"], true, out);
    assert.match(String(lines[0]!["message"]), /no WebSocket/);
    assert.ok(lines.some((l) => l["log"] === "leasesvc elector: plain renewals" && /no WebSocket/.test(String(l["why"]))), out);
    assert.ok(lines.some((l) => l["leading"] === true), out);
    assert.equal(rest.seen.filter((x) => x.path.startsWith("/v1/sessions")).length, 0, "nothing asked of the sessions route");
  });
});

describe("Elector through a session", () => {
  test("by default it holds through the Client's shared session, says so, and shares one session between Electors", async () => {
    const c = client();
    const opens = fake.of("open").length;
    const a = elector(c, lease());
    const b = elector(c, lease());
    await waitFor("both leading", () => a.terms.length === 1 && b.terms.length === 1);
    assert.equal(fake.of("open").length, opens + 1, "one session for both");
    assert.ok(a.logs.includes("leasesvc elector: holding through a session (window 1s)"), a.logs.join("\n"));
    assert.ok(a.e.isLeader && b.e.isLeader);
    // Sessions send no renewals; the deadline follows the heartbeats.
    const d = a.e.safeDeadline;
    await waitFor("the deadline to move", () => a.e.safeDeadline > d);
    const closes = fake.of("close").length;
    a.ac.abort();
    await a.run;
    assert.equal(fake.of("release").length >= 1, true, "released through the session");
    assert.equal(fake.of("close").length, closes, "the session stays open while b uses it");
    b.ac.abort();
    await b.run;
    await waitFor("the shared session closed", () => fake.of("close").length === closes + 1);
  });

  test("heartbeats that are no longer acknowledged end the term at the session's deadline", async () => {
    const c = client();
    // A 5 s window arms the timer 500 ms (the largest timer slack) early: room for a timer that
    // fires late on a loaded machine (164 ms was seen with a 400 ms window's 40 ms slack).
    const s = await open(c, 5000);
    const name = lease();
    const r = elector(c, name, { session: s });
    await waitFor("leading", () => r.terms.length === 1);
    fake.ack = "none";
    await waitFor("the term to end", () => r.terms[0]!.endedAt !== undefined);
    const t = r.terms[0]!;
    assert.ok(t.reason instanceof SafeDeadlineError, String(t.reason));
    // An ack already on its way when acks stopped may have moved the deadline once more: the last one counts.
    const deadline = s.deadline();
    assert.ok(t.endedAt! <= deadline, `ended at ${t.endedAt}, after the deadline ${deadline}`);
    // Armed at the deadline less the timer slack (10% of the window, at most 500 ms): not earlier.
    assert.ok(t.endedAt! >= deadline - 500 - 2, `ended at ${t.endedAt}, well before the deadline ${deadline}`);
    assert.ok(r.logs.includes("leasesvc elector: holding through a session (window 5s)"), r.logs.join("\n"));
  });

  test("a lost push ends the term at once; nothing is released", async () => {
    const c = client();
    const s = await open(c);
    const name = lease();
    const r = elector(c, name, { session: s });
    await waitFor("leading", () => r.terms.length === 1);
    const releases = fake.of("release").length;
    fake.end(name, { type: "lost", reason: "released" });
    await waitFor("the term to end", () => r.terms[0]!.endedAt !== undefined);
    // LeaseLostError, not SafeDeadlineError: the push ended it, not the deadline.
    assert.ok(r.terms[0]!.reason instanceof LeaseLostError, String(r.terms[0]!.reason));
    assert.equal(fake.of("release").length, releases);
    // It campaigns again and leads a new holding.
    await waitFor("a new term", () => r.terms.length === 2);
    assert.equal(r.terms[1]!.token, r.terms[0]!.token + 1);
  });

  test("a revoked push ends the term; a yield push steps down and releases", async () => {
    const c = client();
    const s = await open(c);
    const name = lease();
    const r = elector(c, name, { session: s });
    await waitFor("leading", () => r.terms.length === 1);
    fake.end(name, { type: "revoked", reason: "maintenance", operator: "ops@example.com" });
    await waitFor("the term to end", () => r.terms[0]!.endedAt !== undefined);
    assert.ok(r.terms[0]!.reason instanceof LeaseLostError);
    await waitFor("a new term", () => r.terms.length === 2);
    const token = r.terms[1]!.token;
    fake.push({ type: "yield", name, fencingToken: token, to: "better" });
    await waitFor("stepping down", () => r.terms[1]!.endedAt !== undefined);
    assert.ok(r.terms[1]!.reason instanceof YieldedError);
    await waitFor("the release", () => fake.of("release").some((m) => m.msg["fencingToken"] === token));
  });

  test("a dropped socket resumes within the window: the term goes on", async () => {
    const c = client();
    const s = await open(c, 5000); // a window a loaded machine reconnects within
    const name = lease();
    const r = elector(c, name, { session: s });
    await waitFor("leading", () => r.terms.length === 1);
    fake.drop();
    await waitFor("resumed", () => s.epoch === 2);
    const acked = s.lastAckSentAt;
    await waitFor("an ack after the resume", () => s.lastAckSentAt > acked);
    assert.equal(r.terms[0]!.endedAt, undefined, "still leading");
    assert.ok(r.e.isLeader);
  });

  test("a move: the term goes on across the new socket, and its release travels over it", async () => {
    const c = client();
    const s = await open(c, 5000);
    const name = lease();
    const r = elector(c, name, { session: s });
    await waitFor("leading", () => r.terms.length === 1);
    const old = fake.lastSock;
    fake.push({ type: "move", reason: "max_age" }, old);
    await waitFor("moved", () => s.epoch === 2 && fake.closedAt.has(old));
    assert.equal(r.terms[0]!.endedAt, undefined, "still leading");
    const token = r.terms[0]!.token;
    r.ac.abort();
    await r.run;
    const rel = fake.of("release").find((m) => m.msg["name"] === name && m.msg["fencingToken"] === token);
    assert.ok(rel !== undefined && rel.sock !== old, "released over the new socket");
  });

  test("plainRenewals opts out; checkpoints and transfers go through the session otherwise", async () => {
    const c = client();
    const s = await open(c);
    const name = lease();
    const r = elector(c, name, { session: s });
    await waitFor("leading", () => r.terms.length === 1);
    await r.e.checkpoint({ n: 1 });
    assert.deepEqual(fake.of("renew").at(-1)!.msg["checkpoint"], { n: 1 });
    await r.e.transfer("next", { n: 2 });
    assert.deepEqual(fake.of("transfer").at(-1)!.msg["checkpoint"], { n: 2 });

    const rest = await FakeService.start();
    cleanups.push(() => rest.close());
    const p = elector(client(rest.url), lease(), { plainRenewals: true, ttlMs: 900 });
    await waitFor("leading with plain renewals", () => p.terms.length === 1);
    assert.ok(p.logs.includes("leasesvc elector: plain renewals"), p.logs.join("\n"));
    await waitFor("a REST renew", () => rest.count(":renew") > 0);
    assert.equal(rest.seen.filter((x) => x.path.startsWith("/v1/sessions")).length, 0, "no session asked for");
  });

  test("a service without sessions: the Elector falls back to plain renewals and says so", async () => {
    const rest = await FakeService.start();
    cleanups.push(() => rest.close());
    const r = elector(client(rest.url), lease(), { ttlMs: 900 });
    await waitFor("leading", () => r.terms.length === 1);
    assert.ok(r.logs.includes("leasesvc elector: plain renewals"), r.logs.join("\n"));
    await waitFor("a REST renew", () => rest.count(":renew") > 0);
  });

  test("a service at its session limit (429 to open): the Elector falls back to plain renewals and says why; the next run asks again", async () => {
    const rest = await FakeService.start();
    cleanups.push(() => rest.close());
    rest.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => fake.server.emit("upgrade", req, socket, head));
    fake.refuseOpen = 429;
    const c = client(rest.url);
    const opens = fake.of("open").length;
    const lines: string[] = [];
    const logger = { info: (m: string, f?: Record<string, unknown>) => lines.push(`${m} ${JSON.stringify(f)}`), warn: () => undefined };
    const r = elector(c, lease(), { ttlMs: 900 }, { logger });
    await waitFor("leading with plain renewals", () => r.terms.length === 1);
    assert.ok(lines.some((l) => l.startsWith("leasesvc elector: plain renewals") && l.includes("the service's session limit is reached")), lines.join("\n"));
    await waitFor("a REST renew", () => rest.count(":renew") > 0);
    assert.equal(fake.of("open").length, opens + 1);
    const r2 = elector(c, lease(), { ttlMs: 900 });
    await waitFor("the second leading", () => r2.terms.length === 1);
    assert.equal(fake.of("open").length, opens + 2, "not remembered: the next run asks for a session again");
  });

  test("a 501 on the upgrade falls back too", async () => {
    const srv = createServer((_q, res) => {
      res.writeHead(501);
      res.end();
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    cleanups.push(() => new Promise((r) => srv.close(r)));
    const err = await client(`http://127.0.0.1:${(srv.address() as AddressInfo).port}`)
      .openSession()
      .catch((e: unknown) => e);
    assert.ok(err instanceof SessionsUnsupportedError, String(err));
  });

  test("the shared session ended (the service forgot it): the Elector opens another and leads again", async () => {
    const c = client();
    const name = lease();
    const r = elector(c, name);
    await waitFor("leading", () => r.terms.length === 1);
    const opens = fake.of("open").length;
    fake.forgetSessions();
    fake.leases.delete(name);
    fake.drop();
    await waitFor("the term to end", () => r.terms[0]!.endedAt !== undefined);
    // L2: the holding ends with the lost error, the session's end its cause.
    const reason = r.terms[0]!.reason;
    assert.ok(reason instanceof LeaseLostError && reason.code === "lease_lost" && reason.cause instanceof SessionEndedError, String(reason));
    await waitFor("a new term", () => r.terms.length === 2);
    assert.equal(fake.of("open").length, opens + 1);
    assert.equal(r.e.keeper.mode, "session", "the mode stays");
  });
});
