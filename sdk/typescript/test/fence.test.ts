/** The fence module on keys of the tests' own: every refusal and its reason, the JWKS cache's rate limit, the handler wrapper, and the Ed25519 edge cases. */
import assert from "node:assert/strict";
import { type AddressInfo } from "node:net";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import { webcrypto } from "node:crypto";
import { describe, test } from "node:test";
import { fence } from "@leasesvc/client";
import { L, checkEd25519, encodingProblem, verifyEd25519 } from "../src/ed25519.js";
import { b64u, claims, newKey, sign, signRaw, staticKeys } from "./helpers/proofs.js";
import { repoRoot } from "./helpers/service.js";

/** refusal asserts that p rejects with a FenceError of reason. */
async function refusal(p: Promise<unknown>, reason: fence.FenceReason): Promise<fence.FenceError> {
  const e = await p.then(
    (v) => assert.fail(`admitted (${JSON.stringify(v)}), want ${reason}`),
    (e: unknown) => e,
  );
  assert.ok(e instanceof fence.FenceError, String(e));
  assert.equal(e.reason, reason, e.message);
  return e;
}

describe("fence", () => {
  test("Guard: a valid proof is admitted; each way of forging, altering or replaying one is refused with its reason and status", async () => {
    const k = await newKey();
    const other = await newKey();
    const g = new fence.Guard(new fence.Verifier(staticKeys(k), "leasesvc"));
    const c = await g.check("orders", await sign(k, claims("orders", 7)));
    assert.deepEqual(c, claims("orders", 7));
    const parts = (await sign(k, claims("orders", 8))).split(".");
    const otherSigned = (await sign(other, claims("orders", 9999))).split(".");
    const cases: [string, string, fence.FenceReason, number][] = [
      ["bare token", "9999", "malformed", 403],
      ["tampered payload", `${parts[0]}.${b64u(JSON.stringify(claims("orders", 9999)))}.${parts[2]}`, "bad_signature", 403],
      ["wrong signature", `${parts[0]}.${otherSigned[1]}.${otherSigned[2]}`, "bad_signature", 403],
      ["unknown kid", await sign(other, claims("orders", 9999)), "unknown_key", 403],
      ["other lease", await sign(k, claims("billing", 9999)), "other_lease", 403],
      ["lower token after higher", await sign(k, claims("orders", 6)), "stale", 409],
      ["other issuer", await sign(k, claims("orders", 9, { iss: "evil" })), "wrong_issuer", 403],
      ["alg none", `${b64u(JSON.stringify({ alg: "none", kid: k.kid, typ: fence.proofType }))}.${parts[1]}.`, "malformed", 403],
      ["alg none, signed anyway", await signRaw(k, { alg: "none", kid: k.kid, typ: fence.proofType }, claims("orders", 9)), "malformed", 403],
      ["another typ", await signRaw(k, { alg: "EdDSA", kid: k.kid, typ: "JWT" }, claims("orders", 9)), "malformed", 403],
      ["no kid", await signRaw(k, { alg: "EdDSA", typ: fence.proofType }, claims("orders", 9)), "malformed", 403],
      ["an unknown header member", await signRaw(k, { alg: "EdDSA", kid: k.kid, typ: fence.proofType, jku: "https://evil" }, claims("orders", 9)), "malformed", 403],
      ["token 0", await sign(k, claims("orders", 0)), "malformed", 403],
      ["token as a string", await signRaw(k, { alg: "EdDSA", kid: k.kid, typ: fence.proofType }, { ...claims("orders", 9), fencingToken: "9" }), "malformed", 403],
      ["iat not an integer", await signRaw(k, { alg: "EdDSA", kid: k.kid, typ: fence.proofType }, { ...claims("orders", 9), iat: "yesterday" }), "malformed", 403],
      ["no holder", await sign(k, claims("orders", 9, { holder: "" })), "malformed", 403],
      ["padded base64", parts.join(".") + "=", "malformed", 403],
      ["truncated", parts.join(".").slice(0, -3), "malformed", 403],
      ["four parts", parts.join(".") + ".x", "malformed", 403],
      ["too long", "a".repeat(5000), "malformed", 403],
      ["empty", "", "missing", 401],
    ];
    for (const [what, proof, reason, status] of cases) {
      const e = await refusal(g.check("orders", proof), reason);
      assert.equal(e.status, status, what);
      assert.match(e.message, /^fence: /, what);
    }
    assert.equal(g.highest("orders"), 7, "refused proofs change nothing");
    for (const tok of [8, 8, 9]) await g.check("orders", await sign(k, claims("orders", tok))); // equal tokens: one holder writes many times
    assert.equal(g.highest("orders"), 9);
    assert.equal(g.highest("billing"), 0);
  });

  test("verify without an issuer takes any; the claims are the payload's", async () => {
    const k = await newKey();
    const c = claims("a", 3, { iss: "elsewhere", principal: "" });
    assert.deepEqual(await fence.verify(await sign(k, c), staticKeys(k)), c);
    await refusal(fence.verify(await sign(k, c), staticKeys(k), { issuer: "leasesvc" }), "wrong_issuer");
  });

  test("parseJWKS: a kid that is not its key's thumbprint is refused; keys of other types are left out", async () => {
    const k = await newKey();
    const other = await newKey();
    await assert.rejects(fence.parseJWKS({ keys: [{ ...k.jwk, kid: other.kid }] }), /thumbprint/);
    const keys = await fence.parseJWKS(JSON.stringify({ keys: [k.jwk, { kty: "RSA", kid: "rsa-1", n: "x", e: "AQAB" }] }));
    assert.deepEqual(keys.kids, [k.kid]);
    assert.deepEqual(await fence.verify(await sign(k, claims("a", 1)), keys), claims("a", 1));
  });

  test("RemoteKeys: an unknown kid fetches the JWKS again, at most once per refetchMs however many proofs come under invented kids", async () => {
    const k1 = await newKey();
    const k2 = await newKey();
    const stranger = await newKey();
    let served: fence.JWKS = { keys: [k1.jwk] };
    const asked: string[] = [];
    const srv = createServer((req, res) => {
      asked.push(new URL(req.url ?? "/", "http://x").searchParams.get("kid") ?? "");
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(served));
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    try {
      let now = 1_800_000_000_000;
      const rk = new fence.RemoteKeys(`http://127.0.0.1:${(srv.address() as AddressInfo).port}/.well-known/jwks.json`, { refetchMs: 60_000, now: () => now });
      const v = new fence.Verifier(rk);
      await v.verify(await sign(k1, claims("a", 1)));
      served = { keys: [k1.jwk, k2.jwk] }; // a new instance started
      const strangers = await Promise.all([1, 2, 3, 4, 5].map((t) => sign(stranger, claims("a", t))));
      for (const e of await Promise.all(strangers.map((p) => refusal(v.verify(p), "unknown_key")))) assert.match(e.message, /refetched at most every 60000 ms/);
      assert.equal(asked.length, 1, "no fetch within refetchMs");
      now += 60_000;
      await v.verify(await sign(k2, claims("a", 3)));
      assert.deepEqual(asked, [k1.kid, k2.kid], "each fetch names the kid (so that the instance reads its backend)");
      await v.verify(await sign(k1, claims("a", 4)));
      assert.equal(rk.fetches, 2, "a known key is answered from memory");
    } finally {
      srv.close();
    }
  });

  test("RemoteKeys: a key the JWKS no longer lists (its retention ended) is forgotten once maxAgeMs passed; its proofs are then unknown_key", async () => {
    const k1 = await newKey();
    const k2 = await newKey();
    const k3 = await newKey(); // listed at first, never used
    let served: fence.JWKS | undefined = { keys: [k1.jwk, k2.jwk, k3.jwk] };
    const asked: string[] = [];
    const jwks: typeof fetch = async (input) => {
      asked.push(new URL(String(input)).searchParams.get("kid") ?? "");
      return served === undefined ? new Response("down", { status: 503 }) : new Response(JSON.stringify(served), { status: 200 });
    };
    let now = 1_800_000_000_000;
    const rk = new fence.RemoteKeys("http://leasesvc.test/.well-known/jwks.json", { fetch: jwks, refetchMs: 10_000, maxAgeMs: 60_000, now: () => now });
    const v = new fence.Verifier(rk);
    await v.verify(await sign(k1, claims("a", 1)));
    now += 59_999;
    await v.verify(await sign(k1, claims("a", 2)));
    await v.verify(await sign(k2, claims("a", 2)));
    assert.equal(rk.fetches, 1, "within maxAgeMs a listed key is answered from memory");

    // The JWKS cannot be read: a key listed before is still used (only the service's answer retires a key).
    served = undefined;
    now += 1;
    await v.verify(await sign(k1, claims("a", 3)));
    assert.deepEqual(asked, [k1.kid, k1.kid]);

    // k1's instance ended a retention ago: the service lists k2 only.
    served = { keys: [k2.jwk] };
    now += 5_000;
    await v.verify(await sign(k1, claims("a", 4))); // the refetch limit holds: asked again no sooner than refetchMs
    assert.equal(rk.fetches, 2);
    now += 5_000;
    const e = await refusal(v.verify(await sign(k1, claims("a", 5))), "unknown_key");
    assert.match(e.message, /no longer listed/);
    assert.deepEqual(asked, [k1.kid, k1.kid, k1.kid], "the key is asked about by name");
    now += 1;
    await refusal(v.verify(await sign(k1, claims("a", 6))), "unknown_key"); // forgotten: not used again
    await refusal(v.verify(await sign(k3, claims("a", 6))), "unknown_key"); // unlisted too, and listed by no answer for maxAgeMs: forgotten with it
    assert.deepEqual(await v.verify(await sign(k2, claims("a", 7))), claims("a", 7), "the key still listed is listed afresh by that answer");
    assert.equal(rk.fetches, 3);
  });

  test("a proof is accepted only in its one canonical base64url encoding: a last character with non-zero unused bits is malformed", async () => {
    const k = await newKey();
    const g = new fence.Guard(new fence.Verifier(staticKeys(k)));
    const good = await sign(k, claims("orders", 3));
    await g.check("orders", good);
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    /** reencoded sets the lowest unused bit of part's last character: the same bytes, another spelling. */
    const reencoded = (part: string): string => {
      const i = alphabet.indexOf(part.at(-1)!);
      const out = part.slice(0, -1) + alphabet[i ^ 1]!;
      assert.deepEqual(Buffer.from(out, "base64url"), Buffer.from(part, "base64url"), "a lax decoder reads the same bytes");
      return out;
    };
    const [h, p, s] = good.split(".") as [string, string, string];
    assert.equal(s.length % 4, 2, "a signature (64 bytes) ends in a character with 4 unused bits");
    const cases: [string, string][] = [["signature", `${h}.${p}.${reencoded(s)}`]];
    if (h.length % 4 !== 0) cases.push(["header", `${reencoded(h)}.${p}.${s}`]);
    if (p.length % 4 !== 0) cases.push(["payload", `${h}.${reencoded(p)}.${s}`]);
    for (const [what, proof] of cases) {
      const e = await refusal(g.check("orders", proof), "malformed");
      assert.equal(e.status, 403, what);
    }
    assert.deepEqual(await g.check("orders", good), claims("orders", 3), "the canonical proof still passes");
  });

  test("RemoteKeys: a JWKS that cannot be read is keys_unavailable (503), not a forgery", async () => {
    const k = await newKey();
    const failing: typeof fetch = async () => new Response("no", { status: 500 });
    const e = await refusal(fence.verify(await sign(k, claims("a", 1)), new fence.RemoteKeys("http://leasesvc.invalid/.well-known/jwks.json", { fetch: failing })), "keys_unavailable");
    assert.equal(e.status, 503);
  });

  test("Guard.handler: the header's proof is checked before the handler runs, which gets its claims; a missing or stale one never reaches it", async () => {
    const k = await newKey();
    const g = new fence.Guard(new fence.Verifier(staticKeys(k)));
    const wrote: number[] = [];
    const h = g.handler(
      (req) => new URL(req.url).pathname.split("/").pop() ?? "",
      (_req, c) => {
        wrote.push(c.fencingToken);
        return new Response("ok");
      },
    );
    const cases: [string, number, string][] = [
      ["", 401, "missing"],
      [await sign(k, claims("orders", 5)), 200, ""],
      [await sign(k, claims("orders", 4)), 409, "stale"],
      ["5", 403, "malformed"],
      [await sign(k, claims("billing", 9)), 403, "other_lease"],
      [await sign(k, claims("orders", 5)), 200, ""],
    ];
    for (const [proof, status, reason] of cases) {
      const res = await h(new Request("http://sink/data/orders", { method: "PUT", headers: proof ? { [fence.header]: proof } : {} }));
      const body = await res.text();
      assert.equal(res.status, status, `proof ${proof.slice(0, 20)}: ${body}`);
      if (reason) {
        assert.equal(res.headers.get("leasesvc-fence-reason"), reason);
        assert.match(body, /^fence: /);
      }
    }
    assert.deepEqual(wrote, [5, 5]);
  });

  test("Lease.proof is parsed from an answer that carries one, and absent otherwise", async () => {
    const { parseLease } = await import("@leasesvc/client");
    assert.equal(parseLease({ name: "a", proof: "h.p.s" }).proof, "h.p.s");
    assert.equal("proof" in parseLease({ name: "a" }), false);
  });
});

// --- Ed25519 edge cases every leasesvc verifier refuses alike ---

const hex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "hex"));
const le = (n: bigint): Uint8Array => {
  const b = new Uint8Array(32);
  for (let i = 0; i < 32; i++, n >>= 8n) b[i] = Number(n & 0xffn);
  return b;
};
const fromLE = (b: Uint8Array): bigint => b.reduceRight((n, x) => (n << 8n) | BigInt(x), 0n);

/**
 * The 8 small-order points (canonical), then non-canonical encodings of
 * small-order points: y = p + 1 (the identity), y = p (order 4), and
 * x = 0 with the sign bit set (y = 1, y = p − 1): beside the project's
 * shared vectors (fence/testdata/ed25519_vectors.json), tried as forgeries
 * with R = each of them and S = 0.
 */
const smallOrder = [
  "0100000000000000000000000000000000000000000000000000000000000000",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0000000000000000000000000000000000000000000000000000000000000080",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
];
const nonCanonicalSmall = [
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "0100000000000000000000000000000000000000000000000000000000000080",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
];

/** RFC 8032 §7.1 tests 1 and 2. */
const rfc8032 = [
  {
    pub: "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    msg: "",
    sig: "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
  },
  {
    pub: "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
    msg: "72",
    sig: "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
  },
];

interface SharedVector {
  name: string;
  public_key: string;
  message: string;
  signature: string;
  valid: boolean;
  reason: string;
}

describe("Ed25519 edge cases", () => {
  test("the project's shared vectors (fence/testdata/ed25519_vectors.json): each is answered as valid or refused for the reason the file gives", { skip: repoRoot() === "" ? "the repository is not above the package" : undefined }, async () => {
    const doc = JSON.parse(readFileSync(join(repoRoot(), "fence", "testdata", "ed25519_vectors.json"), "utf8")) as {
      rfc8032: { name: string; public_key: string; message: string; signature: string }[];
      vectors: SharedVector[];
    };
    assert.ok(doc.rfc8032.length >= 2 && doc.vectors.length >= 20, "the file has its vectors");
    for (const v of doc.rfc8032) assert.equal(await checkEd25519(hex(v.public_key), hex(v.message), hex(v.signature)), "", v.name);
    for (const v of doc.vectors) {
      const got = await checkEd25519(hex(v.public_key), hex(v.message), hex(v.signature));
      assert.equal(got, v.valid ? "" : v.reason, v.name);
    }
  });

  test("RFC 8032's vectors verify; with S + L, a flipped bit or another message they do not", async () => {
    for (const v of rfc8032) {
      const pub = hex(v.pub);
      const sig = hex(v.sig);
      assert.equal(await verifyEd25519(pub, hex(v.msg), sig), true, v.pub);
      assert.equal(await verifyEd25519(pub, new TextEncoder().encode("x"), sig), false);
      const flipped = sig.slice();
      flipped[5]! ^= 1;
      assert.equal(await verifyEd25519(pub, hex(v.msg), flipped), false);
      const sPlusL = sig.slice();
      sPlusL.set(le(fromLE(sig.subarray(32)) + L), 32);
      assert.equal(await verifyEd25519(pub, hex(v.msg), sPlusL), false, "S ≥ L");
    }
  });

  test("small-order and non-canonical keys and R points are refused, where WebCrypto alone takes some of them", async (t) => {
    const msg = new TextEncoder().encode("leasesvc");
    let webcryptoTook = 0;
    for (const a of [...smallOrder, ...nonCanonicalSmall]) {
      assert.notEqual(encodingProblem(hex(a)), "", a);
      for (const r of [smallOrder[0]!, a]) {
        const sig = new Uint8Array(64);
        sig.set(hex(r)); // S = 0: [0]B = R + [k]A holds for R and A of small order, cofactorless, whenever [k]A = −R
        assert.equal(await verifyEd25519(hex(a), msg, sig), false, `A ${a}, R ${r}, S 0`);
        try {
          const key = await webcrypto.subtle.importKey("raw", hex(a), { name: "Ed25519" }, false, ["verify"]);
          if (await webcrypto.subtle.verify("Ed25519", key, sig, msg)) webcryptoTook++;
        } catch {
          // refused at import
        }
      }
    }
    // Node 20's WebCrypto (OpenSSL, cofactorless) takes several of these forgeries; a later Node refusing them all changes nothing here.
    t.diagnostic(`WebCrypto alone verified ${webcryptoTook} of the ${2 * (smallOrder.length + nonCanonicalSmall.length)} forgeries`);
  });

  test("a proof under a small-order key with a small-order R and S = 0 is refused as bad_signature, whatever its kid", async () => {
    for (const a of smallOrder) {
      const x = b64u(hex(a));
      const kid = await fence.keyId(x);
      const keys = await fence.parseJWKS({ keys: [{ kty: "OKP", crv: "Ed25519", x, kid }] });
      const signed = `${b64u(JSON.stringify({ alg: "EdDSA", kid, typ: fence.proofType }))}.${b64u(JSON.stringify(claims("orders", 9999)))}`;
      const sig = new Uint8Array(64);
      sig.set(hex(smallOrder[0]!));
      await refusal(fence.verify(`${signed}.${b64u(sig)}`, keys), "bad_signature");
    }
  });

  test("a proof whose S is S + L, or whose R is not canonical, is refused as bad_signature", async () => {
    const k = await newKey();
    const [h, p, s] = (await sign(k, claims("orders", 1))).split(".") as [string, string, string];
    const sig = new Uint8Array(Buffer.from(s, "base64url"));
    const sPlusL = sig.slice();
    sPlusL.set(le(fromLE(sig.subarray(32)) + L), 32);
    const e = await refusal(fence.verify(`${h}.${p}.${b64u(sPlusL)}`, staticKeys(k)), "bad_signature");
    assert.match(e.message, /S is not below/);
    const rNonCanonical = sig.slice();
    rNonCanonical.set(hex(nonCanonicalSmall[0]!));
    await refusal(fence.verify(`${h}.${p}.${b64u(rNonCanonical)}`, staticKeys(k)), "bad_signature");
  });
});
