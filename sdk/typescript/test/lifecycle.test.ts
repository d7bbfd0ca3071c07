/**
 * The keeper's lifecycle (issue 46, rules L1–L4, binding for every SDK):
 * when the mode is chosen, who reopens a session the service ended, what
 * a CancelBefore that does not fit does, when renewal starts and stops.
 */
import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import {
  Client,
  Elector,
  type ElectorOptions,
  type Holding,
  InvalidArgumentError,
  Keeper,
  type KeeperModeInfo,
  type KeeperOptions,
  LeaseLostError,
  RateLimitedError,
  SessionEndedError,
  cancelBeforeFits,
  cancelBeforeFor,
  cancelBeforeLimit,
  deadlineOf,
  defaultCancelBefore,
  safeSpan,
  stopTime,
} from "@leasesvc/client";
import { FakeService } from "./helpers/fake.js";
import { FakeClock } from "./helpers/fakeclock.js";
import { FakeSessionServer } from "./helpers/fakesession.js";

let rest: FakeService;
let bare: FakeService;
let ses: FakeSessionServer;
before(async () => {
  rest = await FakeService.start();
  bare = await FakeService.start(); // no sessions route
  ses = await FakeSessionServer.start();
  // Sessions upgrade through the REST fake's port too, so one Client talks to both.
  rest.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => ses.server.emit("upgrade", req, socket, head));
});
after(async () => {
  await rest.close();
  await bare.close();
  await ses.close();
});

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  ses.refuseOpen = 0;
  ses.ack = "ack";
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

let seq = 0;
const lease = (): string => `life.${process.pid}.${++seq}`;
const client = (url = rest.url, fetchFn?: typeof fetch): Client =>
  new Client(url, { requestTimeoutMs: 2000, backoff: { initialMs: 5, maxMs: 20 }, ...(fetchFn === undefined ? {} : { fetch: fetchFn }) });

/** keeper returns a keeper closed after the test, and the modes it reported (onMode). */
function keeper(c: Client, opts: KeeperOptions = {}): { k: Keeper; modes: KeeperModeInfo[] } {
  const modes: KeeperModeInfo[] = [];
  const k = new Keeper(c, { ...opts, onMode: (m) => void modes.push(m) });
  cleanups.push(() => k.close());
  return { k, modes };
}

/** waitFor polls cond until it holds. */
async function waitFor(what: string, cond: () => boolean, withinMs = 10_000): Promise<void> {
  const until = Date.now() + withinMs;
  while (!cond()) {
    if (Date.now() > until) assert.fail("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** lostWith resolves to the error h ends with (its "lost" event). */
function lostWith(h: Holding): Promise<unknown> {
  return new Promise((resolve) => {
    const off = h.onChange((ev) => {
      if (ev.kind !== "lost") return;
      off();
      resolve(ev.error);
    });
  });
}

/** The service forgets every session and drops its sockets: each session's resume is refused and it ends. */
function endSessions(): void {
  ses.forgetSessions();
  ses.leases.clear();
  ses.drop();
}

describe("L1: the mode is chosen once", () => {
  test("plain renewals asked for: plain, reason asked, known at construction", () => {
    const { k, modes } = keeper(client(), { plainRenewals: true, ttlMs: 3000 });
    assert.equal(k.mode, "plain");
    assert.equal(k.plainReason, "asked");
    assert.deepEqual(k.span, { spanMs: 3000, driftMargin: 0.1, name: "TTL" });
    assert.deepEqual(modes, [{ mode: "plain", plainReason: "asked", spanMs: 3000 }]);
  });

  test("the deprecated mode option means the same", () => {
    const { k } = keeper(client(), { mode: "plain" });
    assert.equal(k.plainReason, "asked");
    assert.throws(() => new Keeper(client(), { plainRenewals: true, session: {} as never }), RangeError);
  });

  test("a service without sessions: plain, reason sessions_unsupported, chosen at start", async () => {
    const { k, modes } = keeper(client(bare.url), { ttlMs: 3000 });
    assert.equal(k.mode, undefined);
    assert.equal(k.span, undefined);
    assert.equal(await k.start(), "plain");
    assert.equal(k.plainReason, "sessions_unsupported");
    assert.equal((await k.hold(lease(), { holder: "a" })).mode, "plain");
    assert.equal(modes.length, 1);
  });

  test("a session-limit refusal is remembered for the keeper's life; a new keeper asks again", async () => {
    ses.refuseOpen = 429;
    const c = client();
    const { k, modes } = keeper(c, { ttlMs: 3000, windowMs: 1000 });
    const h = await k.hold(lease(), { holder: "a" });
    assert.deepEqual([k.mode, k.plainReason, h.mode], ["plain", "session_limit", "plain"]);
    ses.refuseOpen = 0; // a slot is free again
    const opens = ses.of("open").length;
    const h2 = await k.hold(lease(), { holder: "a" });
    assert.deepEqual([k.mode, h2.mode], ["plain", "plain"]);
    assert.equal(ses.of("open").length, opens, "no session asked for again");
    assert.equal(modes.length, 1);
    const { k: k2 } = keeper(c, { ttlMs: 3000, windowMs: 1000 });
    assert.equal(await k2.start(), "session");
    assert.equal(k2.plainReason, "");
  });

  test("the Client's shared session ended and a new one refused at the limit: the hold fails, the mode stays session", async () => {
    const c = client();
    const { k, modes } = keeper(c, {});
    const h = await k.hold(lease(), { holder: "a" });
    assert.equal(k.mode, "session");
    const lost = lostWith(h);
    endSessions();
    await lost;
    ses.refuseOpen = 429;
    await assert.rejects(k.hold(lease(), { holder: "a" }), RateLimitedError);
    assert.equal(k.mode, "session", "not chosen again");
    ses.refuseOpen = 0;
    assert.equal((await k.hold(lease(), { holder: "a" })).mode, "session");
    assert.equal(modes.length, 1);
  });
});

describe("L2: a session the service ended is reopened by its keeper, never by itself", () => {
  for (const [what, opts] of [
    ["its own session", { windowMs: 1000 }],
    ["the Client's shared session", {}],
  ] as const) {
    test(`${what}: the holdings end with lease_lost; the next hold opens a new session of the same window`, async () => {
      const { k } = keeper(client(), opts);
      const h = await k.hold(lease(), { holder: "a" });
      const opens = ses.of("open").length;
      const lost = lostWith(h);
      endSessions();
      const err = await lost;
      assert.ok(err instanceof LeaseLostError && err.code === "lease_lost" && err.cause instanceof SessionEndedError, String(err));
      assert.equal(h.state, "lost");
      assert.equal(ses.of("open").length, opens, "the session does not reopen itself");
      const h2 = await k.hold(lease(), { holder: "a" });
      assert.equal(ses.of("open").length, opens + 1);
      assert.equal(ses.of("open").at(-1)!.msg["windowMs"], 1000);
      assert.deepEqual([k.mode, h2.mode, h2.periodMs, k.failed], ["session", "session", 1000, undefined]);
    });
  }

  test("a session the caller gave is not reopened: holds fail with SessionEndedError", async () => {
    const c = client();
    const s = await c.openSession({ windowMs: 1000, reconnectBackoff: { initialMs: 5, maxMs: 20 } });
    cleanups.push(() => s.close());
    const { k } = keeper(c, { session: s });
    assert.deepEqual(k.span, { spanMs: 1000, driftMargin: 0.1, name: "session window" });
    const h = await k.hold(lease(), { holder: "a" });
    const lost = lostWith(h);
    const opens = ses.of("open").length;
    endSessions();
    await lost;
    await assert.rejects(k.hold(lease(), { holder: "a" }), SessionEndedError);
    assert.ok(k.failed instanceof SessionEndedError);
    assert.equal(ses.of("open").length, opens);
  });

  test("an Elector over the keeper stops leading and campaigns again through the new session", async () => {
    const { k } = keeper(client(), { windowMs: 1000 });
    const name = lease();
    const terms: Array<{ token: number; reason?: unknown }> = [];
    const e = new Elector(k, name, {
      holder: "a",
      callbacks: {
        onStartedLeading: (signal, token) =>
          new Promise<void>((resolve) => {
            const t: { token: number; reason?: unknown } = { token };
            terms.push(t);
            signal.addEventListener("abort", () => {
              t.reason = signal.reason;
              resolve();
            });
          }),
      },
    });
    const ac = new AbortController();
    const run = e.run(ac.signal);
    cleanups.push(async () => {
      ac.abort();
      await run;
    });
    await waitFor("leading", () => terms.length === 1);
    const opens = ses.of("open").length;
    endSessions();
    await waitFor("a second term", () => terms.length === 2);
    assert.ok(terms[0]!.reason instanceof LeaseLostError, String(terms[0]!.reason));
    assert.equal(ses.of("open").length, opens + 1);
    assert.equal(k.mode, "session");
    assert.ok(e.isLeader);
  });
});

describe("L3: a CancelBefore that does not fit is an error, never capped", () => {
  test("the one rule: fits below span × (1 − D) − span / 2; default min(250, span / 10); stop = deadline − CancelBefore", () => {
    assert.equal(safeSpan(1000, 0.1), 900);
    assert.equal(deadlineOf(50, 1000, 0.1), 950);
    assert.equal(stopTime(950, 100), 850);
    assert.equal(cancelBeforeLimit(1000, 0.1), 400);
    assert.equal(cancelBeforeLimit(3000, 0.1), 1200);
    assert.ok(cancelBeforeFits(399, 1000, 0.1));
    assert.ok(!cancelBeforeFits(400, 1000, 0.1));
    assert.ok(!cancelBeforeFits(-1, 1000, 0.1));
    assert.equal(defaultCancelBefore(1000), 100);
    assert.equal(defaultCancelBefore(30_000), 250);
    assert.equal(cancelBeforeFor(undefined, 3000, 0.1, "TTL"), 250);
    assert.equal(cancelBeforeFor(1199, 3000, 0.1, "TTL"), 1199, "not capped, not changed");
    assert.throws(() => cancelBeforeFor(1200, 3000, 0.1, "TTL"), InvalidArgumentError);
  });

  const callbacks: ElectorOptions["callbacks"] = { onStartedLeading: (s) => new Promise<void>((r) => s.addEventListener("abort", () => r())) };

  test("plain: the span is known, so the constructor refuses, naming CancelBefore, the limit and the TTL", () => {
    const { k } = keeper(client(), { plainRenewals: true, ttlMs: 3000 });
    let err: unknown;
    try {
      new Elector(k, lease(), { cancelBeforeMs: 2000, callbacks });
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof InvalidArgumentError, String(err));
    assert.equal(err.code, "invalid_argument");
    assert.match(err.message, /cancelBeforeMs 2000 .*below 1200 ms .*TTL 3000 ms/);
    assert.equal(new Elector(k, lease(), { cancelBeforeMs: 500, callbacks }).cancelBeforeMs, 500);
  });

  test("session: the window is known once the mode settles, so run refuses; one that fits leads", async () => {
    const { k } = keeper(client(), { windowMs: 1000 });
    const e = new Elector(k, lease(), { cancelBeforeMs: 600, callbacks });
    assert.equal(e.cancelBeforeMs, 600, "not checked yet");
    await assert.rejects(e.run(), (err: unknown) => err instanceof InvalidArgumentError && /cancelBeforeMs 600 .*below 400 ms .*session window 1000 ms/.test(err.message));
    assert.throws(() => new Elector(k, lease(), { cancelBeforeMs: 600, callbacks }), InvalidArgumentError, "now known: the constructor refuses");
    const ok = new Elector(k, lease(), { cancelBeforeMs: 100, callbacks });
    const ac = new AbortController();
    const run = ok.run(ac.signal);
    await waitFor("leading", () => ok.isLeader);
    assert.equal(ok.cancelBeforeMs, 100);
    ac.abort();
    await run;
  });
});

describe("L4: every holding is kept until it ends; close releases and stops", () => {
  test("plain: renewed by the keeper alone through 3 TTLs; close releases it and nothing renews after", async () => {
    const clock = new FakeClock();
    const { k } = keeper(client(), { plainRenewals: true, ttlMs: 3000, renewJitter: 0, clock });
    const name = lease();
    const h = await k.hold(name, { holder: "a" });
    let moved = 0;
    h.onChange((ev) => void (ev.kind === "moved" && moved++));
    for (let i = 1; i <= 9; i++) {
      clock.advance(1000); // a renewal is due every TTL/3
      await waitFor(`renewal ${i}`, () => moved === i); // answered: the next one is armed
    }
    assert.equal(rest.count(`${name}:renew`), 9);
    assert.equal(h.state, "held");
    assert.ok(h.deadline > clock.now());
    await k.close();
    assert.equal(h.state, "released");
    assert.equal(rest.count(`${name}:release`), 1);
    assert.equal(clock.armed, 0, "no timer left");
    clock.advance(10_000);
    assert.equal(rest.count(`${name}:renew`), 9);
    await assert.rejects(k.hold(lease(), { holder: "a" }));
  });

  test("a holding granted while the keeper closes is released, and the hold rejects", async () => {
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let acquires = 0;
    const gated: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      if (String(input).endsWith(":acquire")) {
        acquires++;
        await gate;
      }
      return res;
    };
    const { k } = keeper(client(rest.url, gated), { plainRenewals: true, ttlMs: 3000 });
    const name = lease();
    const hold = k.hold(name, { holder: "a" });
    hold.catch(() => undefined);
    await waitFor("the acquire answered", () => acquires === 1);
    await k.close();
    open();
    await assert.rejects(hold, /closed/);
    await waitFor("the release", () => rest.count(`${name}:release`) === 1);
  });

  test("session: kept by the heartbeats with no renewals; close releases it through the session and closes the session", async () => {
    const { k } = keeper(client(), { windowMs: 1000 });
    const name = lease();
    const h = await k.hold(name, { holder: "a" });
    const d = h.deadline;
    await waitFor("the deadline to move", () => h.deadline > d);
    assert.equal(ses.of("renew").filter((m) => m.msg["name"] === name).length, 0);
    const closes = ses.of("close").length;
    await k.close();
    assert.equal(h.state, "released");
    await waitFor("released through the session", () => ses.of("release").some((m) => m.msg["name"] === name));
    await waitFor("the session closed", () => ses.of("close").length === closes + 1);
  });
});
