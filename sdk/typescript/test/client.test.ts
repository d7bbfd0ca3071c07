import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { performance } from "node:perf_hooks";
import {
  Client,
  CredentialsError,
  DeniedError,
  InternalError,
  InvalidArgumentError,
  LeaseError,
  LeaseHeldError,
  LeaseLostError,
  type LeaseEvent,
  NotFoundError,
  PermissionDeniedError,
  RateLimitedError,
  UnauthenticatedError,
  UnavailableError,
  isNewer,
  parseEvent,
} from "@leasesvc/client";
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

const fast = { backoff: { initialMs: 5, maxMs: 20 } };

describe("Client", () => {
  test("acquire, renew, release and get round-trip the lease", async () => {
    const c = new Client(fake.url + "/", fast);
    const l = await c.acquire("rt.a", { holder: "a", ttlMs: 5000, metadata: { addr: "x" } });
    assert.equal(l.name, "rt.a");
    assert.equal(l.holder, "a");
    assert.equal(l.fencingToken, 1);
    assert.equal(l.held, true);
    assert.ok(l.expireTime instanceof Date && l.expireTime.getTime() > l.acquireTime.getTime());
    assert.deepEqual(l.metadata, { addr: "x" });
    assert.equal((await c.acquire("rt.a", { holder: "a", ttlMs: 5000 })).fencingToken, 1, "a repeated acquire keeps the holding");
    assert.equal((await c.renew("rt.a", { holder: "a", fencingToken: 1 })).fencingToken, 1);
    const r = await c.release("rt.a", "a", 1);
    assert.equal(r.held, false);
    assert.equal((await c.get("rt.a")).holder, "a");
    assert.equal((await c.acquire("rt.a", { holder: "b", ttlMs: 5000 })).fencingToken, 2);
    const sent = fake.seen.find((s) => s.path.endsWith(":acquire"))!;
    assert.equal(sent.headers["content-type"], "application/json");
    assert.deepEqual(sent.body, { holder: "a", ttlMs: 5000, metadata: { addr: "x" } });
    assert.equal(sent.headers["authorization"], undefined, "no credentials by default");
  });

  test("an acquire of a lease held by another throws LeaseHeldError with the lease and Retry-After", async () => {
    const c = new Client(fake.url, fast);
    await c.acquire("held.a", { holder: "a", ttlMs: 5000 });
    const err = await c.acquire("held.a", { holder: "b", ttlMs: 5000 }).catch((e: unknown) => e);
    assert.ok(err instanceof LeaseHeldError, String(err));
    assert.equal(err.code, "lease_held");
    assert.equal(err.lease.holder, "a");
    assert.equal(err.lease.fencingToken, 1);
    assert.equal(err.retryAfterMs, 5000);
    assert.equal(fake.count(":acquire"), 2, "lease_held is not retried");
  });

  test("every problem code and bare status maps to its error class", async () => {
    const c = new Client(fake.url, { ...fast, maxAttempts: 1 });
    const cases: Array<[number, string | undefined, new (...a: never[]) => LeaseError, string]> = [
      [409, "lease_lost", LeaseLostError, "lease_lost"],
      [409, "lease_held", LeaseError, "lease_held"],
      [404, "not_found", NotFoundError, "not_found"],
      [400, "invalid_argument", InvalidArgumentError, "invalid_argument"],
      [413, "payload_too_large", InvalidArgumentError, "payload_too_large"],
      [415, "unsupported_media_type", InvalidArgumentError, "unsupported_media_type"],
      [405, "method_not_allowed", InvalidArgumentError, "method_not_allowed"],
      [401, "unauthenticated", UnauthenticatedError, "unauthenticated"],
      [403, "permission_denied", PermissionDeniedError, "permission_denied"],
      [429, "resource_exhausted", RateLimitedError, "resource_exhausted"],
      [503, "unavailable", UnavailableError, "unavailable"],
      [504, "deadline_exceeded", UnavailableError, "deadline_exceeded"],
      [500, "internal", InternalError, "internal"],
      [404, undefined, NotFoundError, "not_found"],
      [401, undefined, UnauthenticatedError, "unauthenticated"],
      [403, undefined, PermissionDeniedError, "permission_denied"],
      [429, undefined, RateLimitedError, "resource_exhausted"],
      [502, undefined, UnavailableError, "unavailable"],
      [418, undefined, InvalidArgumentError, "invalid_argument"],
      [500, undefined, InternalError, "internal"],
    ];
    for (const [status, code, cls, want] of cases) {
      fake.script.push(code === undefined ? { match: "*", status, body: { oops: true } } : { match: "*", status, code });
      const err = await c.get("codes.a").catch((e: unknown) => e);
      assert.ok(err instanceof cls, `${status} ${code}: got ${String(err)}`);
      assert.ok(err instanceof LeaseError);
      assert.equal((err as LeaseError).code, want, `${status} ${code}`);
      assert.equal((err as LeaseError).status, status);
    }
    const denied = [new UnauthenticatedError("x"), new PermissionDeniedError("x")];
    for (const d of denied) assert.ok(d instanceof DeniedError);
    assert.ok(new RateLimitedError("x") instanceof UnavailableError);
    fake.script.push({ match: "*", status: 400, code: "invalid_argument", body: { errors: [{ field: "ttlMs", detail: "too long" }] } });
    const bad = await c.get("codes.a").catch((e: unknown) => e);
    assert.ok(bad instanceof InvalidArgumentError);
    assert.deepEqual(bad.fields, [{ field: "ttlMs", detail: "too long" }]);
    assert.match(bad.message, /ttlMs: too long/);
  });

  test("transient failures are retried with backoff until one succeeds", async () => {
    const c = new Client(fake.url, fast);
    fake.script.push({ match: ":acquire", status: 503, code: "unavailable" }, { match: ":acquire", status: 502 });
    const l = await c.acquire("retry.a", { holder: "a", ttlMs: 5000 });
    assert.equal(l.fencingToken, 1);
    assert.equal(fake.count(":acquire"), 3);
  });

  test("retries stop after maxAttempts with the last error", async () => {
    const c = new Client(fake.url, { ...fast, maxAttempts: 3 });
    fake.fault = "unavailable";
    const err = await c.get("retry.b").catch((e: unknown) => e);
    assert.ok(err instanceof UnavailableError);
    assert.equal(fake.count("retry.b"), 3);
  });

  test("a 429 is retried no earlier than its Retry-After", async () => {
    const c = new Client(fake.url, fast);
    fake.script.push({ match: "*", status: 429, code: "resource_exhausted", headers: { "Retry-After": "1" } });
    const start = performance.now();
    await c.acquire("rl.a", { holder: "a", ttlMs: 5000 });
    assert.ok(performance.now() - start >= 990, "waited the Retry-After in full");
    assert.equal(fake.count(":acquire"), 2);
  });

  test("a 503's Retry-After is capped at the backoff's maximum", async () => {
    const c = new Client(fake.url, { backoff: { initialMs: 5, maxMs: 50 } });
    fake.script.push({ match: "*", status: 503, code: "unavailable", headers: { "Retry-After": "30" } });
    const start = performance.now();
    await c.acquire("ra.a", { holder: "a", ttlMs: 5000 });
    assert.ok(performance.now() - start < 10_000, "did not wait 30 s");
  });

  test("refusals that retrying cannot cure are thrown at once", async () => {
    const c = new Client(fake.url, fast);
    for (const [status, code] of [
      [400, "invalid_argument"],
      [401, "unauthenticated"],
      [403, "permission_denied"],
      [409, "lease_lost"],
      [500, "internal"],
    ] as const) {
      fake.seen.length = 0;
      fake.script.push({ match: "*", status, code });
      await assert.rejects(c.renew("once.a", { holder: "a", fencingToken: 1 }));
      assert.equal(fake.seen.length, 1, code);
    }
  });

  test("revoke retries a 429 but not a 503 (it may have acted)", async () => {
    const c = new Client(fake.url, fast);
    await c.acquire("rv.a", { holder: "a", ttlMs: 5000 });
    fake.seen.length = 0;
    fake.script.push({ match: ":revoke", status: 503, code: "unavailable" });
    await assert.rejects(c.revoke("rv.a", { reason: "test" }), UnavailableError);
    assert.equal(fake.count(":revoke"), 1);
    fake.script.push({ match: ":revoke", status: 429, code: "resource_exhausted" });
    const l = await c.revoke("rv.a", { reason: "test", fencingToken: 1 });
    assert.equal(l.held, false);
    assert.equal(fake.count(":revoke"), 3);
    assert.deepEqual(fake.seen.at(-1)!.body, { reason: "test", fencingToken: 1 });
  });

  test("an attempt that gets no answer times out and is retried", async () => {
    const c = new Client(fake.url, { ...fast, requestTimeoutMs: 100, maxAttempts: 2 });
    fake.fault = "hang";
    const err = await c.get("hang.a").catch((e: unknown) => e);
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /no answer within 100 ms/);
    assert.equal(fake.count("hang.a"), 2);
    fake.fault = "drop";
    await assert.rejects(c.get("hang.a"), UnavailableError);
  });

  test("a connection refused is an UnavailableError, and revoke retries it", async () => {
    const c = new Client("http://127.0.0.1:1", { ...fast, maxAttempts: 2 });
    await assert.rejects(c.get("x"), UnavailableError);
    await assert.rejects(c.revoke("x", { reason: "r" }), UnavailableError);
  });

  test("aborting the signal ends a call and its retries with the signal's reason", async () => {
    const c = new Client(fake.url, { backoff: { initialMs: 10_000, maxMs: 10_000 } });
    fake.fault = "unavailable";
    const ac = new AbortController();
    const p = c.get("abort.a", { signal: ac.signal });
    // Abort once the first attempt was answered (503), while the retry's 10 s backoff runs;
    // a fixed 50 ms came before the request on a loaded machine.
    while (fake.count("abort.a") === 0) await new Promise((r) => setTimeout(r, 5));
    ac.abort(new Error("enough"));
    await assert.rejects(p, /enough/);
    assert.equal(fake.count("abort.a"), 1);
  });

  test("credentials: a static token or a provider, in both headers, asked for on every attempt", async () => {
    await new Client(fake.url, { token: "static-token" }).get("cred.a").catch(() => undefined);
    assert.equal(fake.seen.at(-1)!.headers["authorization"], "Bearer static-token");
    assert.equal(fake.seen.at(-1)!.headers["x-serverless-authorization"], "Bearer static-token");
    let calls = 0;
    const c = new Client(fake.url, { ...fast, token: async () => `tok-${++calls}` });
    fake.script.push({ match: "*", status: 503, code: "unavailable" });
    await c.acquire("cred.a", { holder: "a", ttlMs: 5000 });
    assert.equal(calls, 2);
    assert.equal(fake.seen.at(-1)!.headers["authorization"], "Bearer tok-2");
    await new Client(fake.url, { token: () => "sync-token" }).get("cred.a");
    assert.equal(fake.seen.at(-1)!.headers["x-serverless-authorization"], "Bearer sync-token");
    fake.seen.length = 0;
    const failing = new Client(fake.url, {
      token: () => {
        throw new Error("metadata server down");
      },
    });
    const err = await failing.get("cred.a").catch((e: unknown) => e);
    assert.ok(err instanceof CredentialsError, String(err));
    assert.match(err.message, /metadata server down/);
    await assert.rejects(new Client(fake.url, { token: async () => "" }).get("cred.a"), CredentialsError);
    assert.equal(fake.seen.length, 0, "nothing is sent without a token");
  });

  test("list pages through leases in name order and all() iterates them all", async () => {
    const c = new Client(fake.url, fast);
    for (const n of ["pg.c", "pg.a", "pg.b", "other.x"]) await c.acquire(n, { holder: "h", ttlMs: 5000 });
    const p1 = await c.list({ prefix: "pg.", pageSize: 2 });
    assert.deepEqual(p1.leases.map((l) => l.name), ["pg.a", "pg.b"]);
    assert.notEqual(p1.nextPageToken, "");
    const p2 = await c.list({ prefix: "pg.", pageSize: 2, pageToken: p1.nextPageToken });
    assert.deepEqual(p2.leases.map((l) => l.name), ["pg.c"]);
    assert.equal(p2.nextPageToken, "");
    const names: string[] = [];
    for await (const l of c.all("pg.")) names.push(l.name);
    assert.deepEqual(names, ["pg.a", "pg.b", "pg.c"]);
    assert.ok(fake.seen.some((s) => s.path === "/v1/leases?prefix=pg.&pageSize=2"));
  });

  test("constructor options are checked", () => {
    assert.throws(() => new Client("ftp://x"), TypeError);
    assert.throws(() => new Client("not a url"), TypeError);
    assert.throws(() => new Client(fake.url, { maxAttempts: 0 }), RangeError);
    assert.throws(() => new Client(fake.url, { requestTimeoutMs: -1 }), RangeError);
    assert.throws(() => new Client(fake.url, { backoff: { initialMs: 10, maxMs: 5 } }), RangeError);
  });
});

describe("Client.watch", () => {
  test("gives the state, then each change; reconnects with Last-Event-ID; ends on abort", async () => {
    const c = new Client(fake.url, { backoff: { initialMs: 10, maxMs: 40 } });
    await c.acquire("w.a", { holder: "a", ttlMs: 5000 });
    const ac = new AbortController();
    const got: LeaseEvent[] = [];
    const it = c.watch("w.a", { signal: ac.signal });
    const done = (async () => {
      for await (const ev of it) {
        got.push(ev);
        if (got.length === 2) fake.dropWatchers(); // after "lease" and "released"
        if (got.length === 2) void c.acquire("w.a", { holder: "b", ttlMs: 5000 }).catch(() => undefined);
        if (got.length === 1) void c.release("w.a", "a", 1);
        if (got.length >= 3) ac.abort();
      }
    })();
    await done;
    assert.equal(got[0]!.type, "lease");
    assert.equal(got[0]!.lease?.holder, "a");
    assert.equal(got[1]!.type, "released");
    assert.equal(got[1]!.id, "w.a/1/released");
    assert.ok(isNewer(got[0]!, got[1]!));
    // After the drop: the state again (token 2 held by b, or still released), then maybe acquired.
    assert.equal(got[2]!.type, "lease");
    assert.ok(fake.lastEventIds.includes("w.a/1/released"), `Last-Event-ID sent on reconnect: ${JSON.stringify(fake.lastEventIds)}`);
  });

  test("a deleted event parses and orders after its holding's end, before the next holding", () => {
    const d = parseEvent("deleted", JSON.stringify({ type: "deleted", lease: { name: "x", fencingToken: 2 }, operator: "ops" }), "x/2/deleted");
    assert.equal(d.type, "deleted");
    assert.equal(d.operator, "ops");
    const ended = parseEvent("released", JSON.stringify({ type: "released", lease: { name: "x", fencingToken: 2 } }), "x/2/released");
    const next = parseEvent("acquired", JSON.stringify({ type: "acquired", lease: { name: "x", fencingToken: 3, held: true } }), "x/3/acquired");
    assert.ok(isNewer(ended, d) && !isNewer(d, ended) && isNewer(d, next));
  });

  test("a stream silent for idleTimeoutMs is taken for dead and reconnected", async () => {
    const c = new Client(fake.url, { backoff: { initialMs: 5, maxMs: 10 } });
    const ac = new AbortController();
    let states = 0;
    for await (const ev of c.watch("w.idle", { signal: ac.signal, idleTimeoutMs: 100, lastEventId: "w.idle/7/acquired" })) {
      assert.equal(ev.type, "lease");
      if (++states === 3) ac.abort();
    }
    assert.equal(states, 3);
    assert.equal(fake.count("w.idle:watch"), 3);
    assert.ok(fake.lastEventIds.includes("w.idle/7/acquired"), "the given Last-Event-ID is sent");
  });

  test("a watch of a lease that never existed starts with a null lease", async () => {
    const c = new Client(fake.url, fast);
    for await (const ev of c.watch("w.none")) {
      assert.equal(ev.type, "lease");
      assert.equal(ev.lease, null);
      break;
    }
  });

  test("a refused watch is thrown, not retried", async () => {
    const c = new Client(fake.url, fast);
    const it = c.watch("-bad");
    await assert.rejects(it.next(), InvalidArgumentError);
  });
});
