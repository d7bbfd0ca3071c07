/** Proofs the real leasesvc binary made, verified through its JWKS; each refusal of issue 39's list with its reason. */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, fence } from "@leasesvc/client";
import { b64u, claims, newKey, sign } from "./helpers/proofs.js";
import { type Service, skipReason, startService } from "./helpers/service.js";

const skip = skipReason();
let seq = 0;
const leaseName = (what: string): string => `svc.ts.fence.${what}.${process.pid}.${++seq}`;

async function refusal(p: Promise<unknown>, reason: fence.FenceReason): Promise<fence.FenceError> {
  const e = await p.then(
    (v) => assert.fail(`admitted (${JSON.stringify(v)}), want ${reason}`),
    (e: unknown) => e,
  );
  assert.ok(e instanceof fence.FenceError, String(e));
  assert.equal(e.reason, reason, e.message);
  return e;
}

describe("fencing proofs of the real service", { skip: skip || undefined }, () => {
  let svc: Service;
  before(async () => {
    svc = await startService({ LEASESVC_PROOF_ISSUER: "leasesvc-ts-test" });
  });
  after(async () => {
    await svc?.stop();
  });

  test("a proof from acquire verifies through the service's JWKS; a forged, altered, replayed or misdirected one is refused with its reason", async () => {
    const c = new Client(svc.url);
    const name = leaseName("orders");
    const first = await c.acquire(name, { holder: "a", ttlMs: 5000 });
    assert.ok(first.proof, "the acquire answer carries a proof");
    assert.equal((await c.get(name)).proof, undefined, "get never carries the proof");
    await c.release(name, "a", first.fencingToken);
    const second = await c.acquire(name, { holder: "b", ttlMs: 5000 });
    assert.equal(second.fencingToken, first.fencingToken + 1);
    const otherLease = await c.acquire(leaseName("billing"), { holder: "b", ttlMs: 5000 });

    let fetches = 0;
    const counting: typeof fetch = (input, init) => {
      fetches++;
      return fetch(input, init);
    };
    let now = 1_800_000_000_000; // the rate limit's clock, moved by the test
    const keys = new fence.RemoteKeys(`${svc.url}/.well-known/jwks.json`, { fetch: counting, now: () => now });
    const g = new fence.Guard(new fence.Verifier(keys, "leasesvc-ts-test"));

    const cl = await g.check(name, second.proof);
    assert.deepEqual(
      { lease: cl.lease, fencingToken: cl.fencingToken, holder: cl.holder, iss: cl.iss },
      { lease: name, fencingToken: second.fencingToken, holder: "b", iss: "leasesvc-ts-test" },
    );
    assert.equal(cl.iat, Math.floor(second.acquireTime.getTime() / 1000), "iat is the holding's acquireTime in Unix seconds");
    assert.equal(fetches, 1, "the first proof fetched the JWKS once");

    const [h, p, s] = second.proof!.split(".") as [string, string, string];
    const payload = JSON.parse(Buffer.from(p, "base64url").toString()) as Record<string, unknown>;
    const stranger = await newKey();
    const strangerSig = (await sign(stranger, claims(name, 9999))).split(".")[2]!;

    await refusal(g.check(name, `${h}.${b64u(JSON.stringify({ ...payload, fencingToken: 9999 }))}.${s}`), "bad_signature"); // tampered payload
    await refusal(g.check(name, `${h}.${p}.${strangerSig}`), "bad_signature"); // wrong signature
    now += fence.defaultRefetchMs; // the last fetch is 10 s old: an unknown kid may refetch
    const unknown = await refusal(g.check(name, await sign(stranger, claims(name, 9999, { iss: "leasesvc-ts-test" }))), "unknown_key");
    assert.match(unknown.message, /is not in the service's JWKS/);
    assert.equal(fetches, 2, "the unknown kid refetched the JWKS once");
    await refusal(g.check(name, await sign(stranger, claims(name, 10_000, { iss: "leasesvc-ts-test" }))), "unknown_key");
    assert.equal(fetches, 2, "and not again within 10 s");
    await refusal(g.check(name, otherLease.proof), "other_lease"); // a proof for another lease
    await refusal(g.check(name, first.proof), "stale"); // a lower token after a higher one
    await refusal(g.check(name, "9999"), "malformed"); // a forged bare token
    await refusal(g.check(name, String(second.fencingToken + 1)), "malformed");
    assert.equal(g.highest(name), second.fencingToken, "the refusals changed nothing");
    await g.check(name, second.proof); // the true leader goes on
  });

  test("a static JWKS saved from the service verifies its proofs without network; the handler wrapper fences a sink", async () => {
    const c = new Client(svc.url);
    const name = leaseName("sink");
    const res = await fetch(`${svc.url}/.well-known/jwks.json`);
    assert.equal(res.status, 200);
    const keys = await fence.parseJWKS(await res.text());
    assert.ok(keys.kids.length >= 1);
    const g = new fence.Guard(new fence.Verifier(keys, "leasesvc-ts-test"));
    const written: number[] = [];
    const sink = g.handler(name, (_req, cl) => {
      written.push(cl.fencingToken);
      return new Response(null, { status: 204 });
    });
    const put = (proof?: string): Promise<Response> => sink(new Request("http://sink/orders/1", { method: "PUT", headers: proof ? { [fence.header]: proof } : {} }));

    const a = await c.acquire(name, { holder: "a", ttlMs: 5000 });
    assert.equal((await put(a.proof)).status, 204);
    await c.release(name, "a", a.fencingToken);
    const b = await c.acquire(name, { holder: "b", ttlMs: 5000 });
    assert.equal((await put(b.proof)).status, 204);
    const late = await put(a.proof);
    assert.equal(late.status, 409, await late.text());
    assert.equal((await put()).status, 401);
    const forged = await put(String(b.fencingToken + 100));
    assert.equal(forged.status, 403);
    assert.equal(forged.headers.get("leasesvc-fence-reason"), "malformed");
    assert.equal((await put(b.proof)).status, 204);
    assert.deepEqual(written, [a.fencingToken, b.fencingToken, b.fencingToken]);
  });
});
