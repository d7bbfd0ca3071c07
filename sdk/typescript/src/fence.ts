/**
 * Verifying leasesvc's fencing proofs and keeping sinks fenced
 * (docs/contract.md §17, docs/fencing.md); the TypeScript twin of the Go
 * package fence, with the same checks and the same reasons.
 *
 * A holding comes with a proof: a compact JWS (RFC 7515) signed with EdDSA
 * over Ed25519 (RFC 8037) by the instance that granted it, stating
 * "leasesvc issued fencing token N of lease L to this holder". verify
 * checks one against the service's public keys (RemoteKeys: the JWKS at
 * /.well-known/jwks.json, fetched again on an unknown kid at most every
 * 10 s, and a known key forgotten once the JWKS no longer lists it;
 * StaticKeys: a saved JWKS for a sink without network). A Guard keeps
 * the highest token it has verified per lease and refuses a lower one;
 * Guard.handler does so for a fetch-style handler reading the
 * Leasesvc-Fence request header. Every refusal is a FenceError with a
 * stable reason.
 *
 * A Guard's memory is its process's: a sink that restarts admits a deposed
 * holder's proof again until the next holder writes. Data that outlives
 * the process stores the token with it, in the same transaction.
 */
import type { webcrypto } from "node:crypto";
import { type Ed25519Problem, checkEd25519, encodingProblem, importPublicKey, staticProblem } from "./ed25519.js";

/** The HTTP request header that carries a proof to a sink. */
export const header = "Leasesvc-Fence";

/** The JWS "typ" of a proof. */
export const proofType = "leasesvc-fence+jwt";

/** RemoteKeys' default least time between two fetches of the JWKS, in milliseconds. */
export const defaultRefetchMs = 10_000;

/** RemoteKeys' default time a key is trusted from the fetch that last listed it before the JWKS is asked about it again, in milliseconds. */
export const defaultMaxAgeMs = 600_000;

/** The longest proof read, in bytes (as the Go package). */
export const maxProofBytes = 4096;

/** The largest JWKS document RemoteKeys reads, in bytes. */
export const maxJWKSBytes = 1 << 20;

/** What a proof states: leasesvc issued fencing token fencingToken of lease to holder. */
export interface Claims {
  /** The lease name. */
  lease: string;
  /** The holding's fencing token, ≥ 1. */
  fencingToken: number;
  /** The holder that acquired. */
  holder: string;
  /** The authenticated caller that acquired; empty with authentication off. */
  principal: string;
  /** The holding's acquire time, Unix seconds. */
  iat: number;
  /** The service's name (LEASESVC_PROOF_ISSUER). */
  iss: string;
}

/**
 * Why a proof was refused. Stable: compare with these, not with messages.
 * - "missing": the request carries no proof (401).
 * - "malformed": not a proof of this form: a bare number, a truncated or re-encoded token (base64url other than its one canonical encoding), another alg (403).
 * - "bad_signature": the signature does not verify with the key its kid names: forged or altered (403).
 * - "unknown_key": no key of the service has the proof's kid, or the service no longer lists it (its retention ended), after a refetch if the keys can be refetched (403).
 * - "wrong_issuer": issued by another service than the one expected (403).
 * - "other_lease": the proof is for another lease than the one written (403).
 * - "stale": a higher fencing token of the lease was seen: the proof's holder was deposed (409).
 * - "keys_unavailable": the keys could not be read; nothing is known about the proof (503).
 */
export type FenceReason = "missing" | "malformed" | "bad_signature" | "unknown_key" | "wrong_issuer" | "other_lease" | "stale" | "keys_unavailable";

const statusOf: Record<FenceReason, number> = {
  missing: 401,
  malformed: 403,
  bad_signature: 403,
  unknown_key: 403,
  wrong_issuer: 403,
  other_lease: 403,
  stale: 409,
  keys_unavailable: 503,
};

const summaryOf: Record<FenceReason, string> = {
  missing: "no proof",
  malformed: "malformed proof",
  bad_signature: "bad signature",
  unknown_key: "unknown key",
  wrong_issuer: "wrong issuer",
  other_lease: "proof for another lease",
  stale: "stale fencing token",
  keys_unavailable: "keys unavailable",
};

/** A refused proof. Its message ("fence: <summary>: <details>") may be shown to the caller. */
export class FenceError extends Error {
  override readonly name = "FenceError";
  /** Why: stable, see FenceReason. */
  readonly reason: FenceReason;
  constructor(reason: FenceReason, detail: string, options?: { cause?: unknown }) {
    super(`fence: ${summaryOf[reason]}: ${detail}`, options);
    this.reason = reason;
  }
  /** The HTTP status a sink answers it with: 401 missing, 409 stale, 503 keys unavailable, 403 otherwise. */
  get status(): number {
    return statusOf[this.reason];
  }
}

/** An Ed25519 public key as a JSON Web Key (RFC 7517, RFC 8037). */
export interface JWK {
  kty: string;
  crv: string;
  x: string;
  kid: string;
  alg?: string;
  use?: string;
}

/** A JSON Web Key Set, as /.well-known/jwks.json serves it. */
export interface JWKS {
  keys: JWK[];
}

/** Finds the public key a proof names. */
export interface Keys {
  /**
   * The 32-byte Ed25519 public key under kid. Rejects with a FenceError
   * "unknown_key" when there is none; any other rejection means the keys
   * could not be read.
   */
  key(kid: string, signal?: AbortSignal): Promise<Uint8Array>;
}

// --- base64url and JSON, as strict as the Go package ---

const b64urlRE = /^[A-Za-z0-9_-]*$/;

/**
 * decodeB64url decodes unpadded base64url in its one canonical encoding,
 * refusing any other character and a last character whose unused low bits
 * are not zero (a re-encoded token, RFC 4648 §3.5); null when it is not.
 */
function decodeB64url(s: string): Uint8Array | null {
  if (!b64urlRE.test(s) || s.length % 4 === 1) return null;
  const b = new Uint8Array(Buffer.from(s, "base64url"));
  return encodeB64url(b) === s ? b : null;
}

function encodeB64url(b: Uint8Array): string {
  return Buffer.from(b).toString("base64url");
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

function jsonObject(b: Uint8Array): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(utf8.decode(b));
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** keyId is the RFC 7638 thumbprint of the Ed25519 public key whose x is given (base64url), as leasesvc names its keys. */
export async function keyId(x: string): Promise<string> {
  const canon = `{"crv":"Ed25519","kty":"OKP","x":"${x}"}`;
  return encodeB64url(new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", new TextEncoder().encode(canon))));
}

/**
 * publicKeyOf decodes the key of jwk, checking its type, its length and
 * that its kid is its thumbprint (so a JWKS cannot rename a key).
 */
export async function publicKeyOf(jwk: JWK): Promise<Uint8Array> {
  if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || (jwk.alg !== undefined && jwk.alg !== "" && jwk.alg !== "EdDSA")) {
    throw new Error(`fence: key ${JSON.stringify(jwk.kid)}: want kty OKP, crv Ed25519 (got ${JSON.stringify(jwk.kty)}, ${JSON.stringify(jwk.crv)})`);
  }
  const x = typeof jwk.x === "string" ? decodeB64url(jwk.x) : null;
  if (x === null || x.length !== 32) throw new Error(`fence: key ${JSON.stringify(jwk.kid)}: x is not 32 base64url bytes`);
  if ((await keyId(jwk.x)) !== jwk.kid) throw new Error(`fence: key ${JSON.stringify(jwk.kid)}: kid is not the key's RFC 7638 thumbprint`);
  return x;
}

/** A fixed key set, for sinks without network: give them the service's JWKS (`leasectl fence jwks > jwks.json`). */
export class StaticKeys implements Keys {
  readonly #keys: Map<string, Uint8Array>;
  constructor(keys: Map<string, Uint8Array> = new Map()) {
    this.#keys = new Map(keys);
  }
  /** The kids of the set. */
  get kids(): string[] {
    return [...this.#keys.keys()];
  }
  key(kid: string): Promise<Uint8Array> {
    const k = this.#keys.get(kid);
    return k !== undefined ? Promise.resolve(k) : Promise.reject(new FenceError("unknown_key", `${JSON.stringify(kid)} is not in the static key set`));
  }
}

/**
 * parseJWKS reads a JWKS document (RFC 7517 §5; text or already parsed)
 * into a StaticKeys. Keys of other types are left out; an Ed25519 key that
 * is malformed, or whose kid is not its thumbprint, is an error.
 */
export async function parseJWKS(doc: string | JWKS): Promise<StaticKeys> {
  let set: unknown = doc;
  if (typeof doc === "string") {
    try {
      set = JSON.parse(doc);
    } catch (e) {
      throw new Error(`fence: read JWKS: ${(e as Error).message}`);
    }
  }
  const list = (set as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list)) throw new Error("fence: read JWKS: no keys array");
  const keys = new Map<string, Uint8Array>();
  for (const k of list as JWK[]) {
    if (k === null || typeof k !== "object" || k.kty !== "OKP" || k.crv !== "Ed25519") continue;
    keys.set(k.kid, await publicKeyOf(k));
  }
  return new StaticKeys(keys);
}

/** Options of RemoteKeys. */
export interface RemoteKeysOptions {
  /** The fetch to use. Default globalThis.fetch. */
  fetch?: typeof fetch;
  /** The least time between two fetches, in milliseconds. Default defaultRefetchMs (10 s). */
  refetchMs?: number;
  /**
   * How long a fetched key is used, from the fetch that last listed it,
   * before the JWKS is asked again (?kid=) whether it still lists it, in
   * milliseconds: the service lists a key for its retention
   * (LEASESVC_PROOF_KEY_RETENTION) after its instance ended, and then no
   * more, so such a key is then forgotten and its proofs are
   * "unknown_key". Default defaultMaxAgeMs (10 min, as the Go package's DefaultMaxAge).
   */
  maxAgeMs?: number;
  /** The clock of the rate limit and of maxAgeMs, in milliseconds. Default Date.now. */
  now?: () => number;
}

/**
 * A JWKS fetched from a URL (the service's /.well-known/jwks.json) when a
 * kid it does not know comes, at most once per refetchMs: a flood of proofs
 * under invented kids costs the service one fetch per refetchMs. Each fetch
 * names the kid (?kid=), so an instance that does not list it yet reads
 * its backend.
 *
 * A key is not kept for ever (docs/fencing.md: keys do not outlive their
 * retention): maxAgeMs after the fetch that last listed it, its next use
 * asks the JWKS again (?kid= that key, within the same refetchMs limit);
 * an answer that does not list it forgets it (and every other key no
 * answer listed for maxAgeMs), and its proofs are then "unknown_key".
 * While the JWKS cannot be read a key listed before is still used: only
 * the service's answer retires a key.
 */
export class RemoteKeys implements Keys {
  readonly url: string;
  readonly #fetch: typeof fetch;
  readonly #refetchMs: number;
  readonly #maxAgeMs: number;
  readonly #now: () => number;
  /** The keys known: kid → the key and the time of the last fetch that listed it. */
  readonly #keys = new Map<string, { key: Uint8Array; listedAt: number }>();
  #fetched: number | undefined; // the last fetch attempt
  #failed = false; // the last fetch attempt failed
  #lock: Promise<unknown> = Promise.resolve();
  /** How many times the JWKS was fetched. */
  fetches = 0;

  constructor(url: string, options: RemoteKeysOptions = {}) {
    this.url = url;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#refetchMs = options.refetchMs !== undefined && options.refetchMs > 0 ? options.refetchMs : defaultRefetchMs;
    this.#maxAgeMs = options.maxAgeMs !== undefined && options.maxAgeMs > 0 ? options.maxAgeMs : defaultMaxAgeMs;
    this.#now = options.now ?? Date.now;
  }

  /** The key under kid if it was listed less than maxAgeMs ago. */
  #fresh(kid: string, now: number): Uint8Array | undefined {
    const k = this.#keys.get(kid);
    return k !== undefined && now - k.listedAt < this.#maxAgeMs ? k.key : undefined;
  }

  key(kid: string, signal?: AbortSignal): Promise<Uint8Array> {
    const known = this.#fresh(kid, this.#now());
    if (known !== undefined) return Promise.resolve(known);
    // One lookup at a time: proofs under a new kid that come together cost one fetch.
    const run = this.#lock.then(() => this.#lookup(kid, signal));
    this.#lock = run.catch(() => undefined);
    return run;
  }

  async #lookup(kid: string, signal?: AbortSignal): Promise<Uint8Array> {
    const now = this.#now();
    const fresh = this.#fresh(kid, now);
    if (fresh !== undefined) return fresh;
    const known = this.#keys.get(kid)?.key; // listed, but maxAgeMs ago or more
    if (this.#fetched !== undefined && now - this.#fetched < this.#refetchMs) {
      const listedAt = this.#keys.get(kid)?.listedAt;
      // The JWKS is unreadable (what is known is served), or the last fetch listed it (maxAgeMs < refetchMs).
      if (known !== undefined && (this.#failed || listedAt === this.#fetched)) return known;
      if (known !== undefined) {
        this.#keys.delete(kid);
        throw new FenceError("unknown_key", `${JSON.stringify(kid)} was last listed in the service's JWKS ${now - listedAt!} ms ago (${this.url})`);
      }
      throw new FenceError("unknown_key", `${JSON.stringify(kid)} is not in the JWKS fetched ${now - this.#fetched} ms ago (refetched at most every ${this.#refetchMs} ms)`);
    }
    this.#fetched = now;
    let got: StaticKeys;
    try {
      got = await this.#fetchJWKS(kid, signal);
      this.#failed = false;
    } catch (e) {
      this.#failed = true;
      if (known !== undefined) return known; // unreadable keys retire none
      throw e;
    }
    const listed = new Set(got.kids);
    // A key no fetch listed for maxAgeMs and this one does not list either is gone too (memory stays bounded).
    for (const [id, k] of this.#keys) if (!listed.has(id) && now - k.listedAt >= this.#maxAgeMs) this.#keys.delete(id);
    for (const id of got.kids) this.#keys.set(id, { key: await got.key(id), listedAt: now });
    if (!listed.has(kid)) {
      // Asked about kid by name, the service does not list it (any more: its retention ended).
      this.#keys.delete(kid);
      throw new FenceError("unknown_key", `${JSON.stringify(kid)} is not in the service's JWKS (${this.url})${known !== undefined ? ": no longer listed (its retention ended)" : ""}`);
    }
    return this.#keys.get(kid)!.key;
  }

  async #fetchJWKS(kid: string, signal?: AbortSignal): Promise<StaticKeys> {
    const u = new URL(this.url);
    u.searchParams.set("kid", kid);
    this.fetches++;
    let body: string;
    try {
      const res = await this.#fetch(u, { headers: { accept: "application/json" }, ...(signal ? { signal } : {}) });
      body = await res.text();
      if (res.status !== 200) throw new Error(`status ${res.status}`);
    } catch (e) {
      throw new FenceError("keys_unavailable", `fetch JWKS ${this.url}: ${(e as Error).message}`, { cause: e });
    }
    if (body.length > maxJWKSBytes) throw new FenceError("keys_unavailable", `JWKS ${this.url} is larger than ${maxJWKSBytes} bytes`);
    try {
      return await parseJWKS(body);
    } catch (e) {
      throw new FenceError("keys_unavailable", `JWKS ${this.url}: ${(e as Error).message}`, { cause: e });
    }
  }
}

/** A proof split and decoded, its signature not yet checked. */
interface Parsed {
  kid: string;
  claims: Claims;
  signed: Uint8Array;
  sig: Uint8Array;
}

function malformed(detail: string): FenceError {
  return new FenceError("malformed", detail);
}

/** parse splits and decodes a compact JWS, checking its form only (as the Go package). */
function parse(proof: string): Parsed {
  if (typeof proof !== "string") throw malformed("not a string");
  if (Buffer.byteLength(proof) > maxProofBytes) throw malformed(`longer than ${maxProofBytes} bytes`);
  const parts = proof.split(".");
  if (parts.length !== 3) throw malformed("not a compact JWS (three base64url parts joined by dots)");
  const [h, body, s] = parts as [string, string, string];
  const hb = decodeB64url(h);
  const hdr = hb && jsonObject(hb);
  if (!hdr) throw malformed("header: not base64url of a JSON object");
  for (const k of Object.keys(hdr)) if (k !== "alg" && k !== "kid" && k !== "typ") throw malformed(`header: unknown member ${JSON.stringify(k)}`);
  const { alg, kid, typ } = hdr;
  if (alg !== "EdDSA" || typ !== proofType || typeof kid !== "string" || kid === "") {
    throw malformed(`header must have alg EdDSA, typ ${proofType} and a kid (got alg ${JSON.stringify(alg ?? "")}, typ ${JSON.stringify(typ ?? "")})`);
  }
  const pb = decodeB64url(body);
  const p = pb && jsonObject(pb);
  if (!p) throw malformed("payload: not base64url of a JSON object");
  const str = (k: string): string => {
    const v = p[k];
    if (v === undefined || v === null) return "";
    if (typeof v !== "string") throw malformed(`payload: ${k} is not a string`);
    return v;
  };
  const int = (k: string): number => {
    const v = p[k];
    if (v === undefined || v === null) return 0;
    if (typeof v !== "number" || !Number.isSafeInteger(v)) throw malformed(`payload: ${k} is not an integer`);
    return v;
  };
  const claims: Claims = { lease: str("lease"), fencingToken: int("fencingToken"), holder: str("holder"), principal: str("principal"), iat: int("iat"), iss: str("iss") };
  if (claims.lease === "" || claims.fencingToken < 1 || claims.holder === "") throw malformed("payload must name a lease, a holder and a fencing token ≥ 1");
  const sig = decodeB64url(s);
  if (sig === null || sig.length !== 64) throw malformed("signature is not 64 base64url bytes");
  return { kid, claims, signed: new TextEncoder().encode(`${h}.${body}`), sig };
}

/** Options of verify and Verifier. */
export interface VerifyOptions {
  /** The service's name (LEASESVC_PROOF_ISSUER) every proof must carry; empty or absent: any. */
  issuer?: string;
  /** Aborts a fetch of the keys. */
  signal?: AbortSignal;
}

const imported = new Map<string, Promise<webcrypto.CryptoKey>>();

function cryptoKey(pub: Uint8Array): Promise<webcrypto.CryptoKey> {
  const id = encodeB64url(pub);
  let k = imported.get(id);
  if (k === undefined) {
    k = importPublicKey(pub);
    k.catch(() => imported.delete(id));
    if (imported.size >= 1000) imported.clear();
    imported.set(id, k);
  }
  return k;
}

/**
 * verify checks that proof is a proof signed by one of keys and returns
 * its claims. It rejects with a FenceError: "malformed", "unknown_key",
 * "bad_signature", "wrong_issuer" or "keys_unavailable".
 */
export async function verify(proof: string, keys: Keys, options: VerifyOptions = {}): Promise<Claims> {
  const p = parse(proof);
  let pub: Uint8Array;
  try {
    pub = await keys.key(p.kid, options.signal);
  } catch (e) {
    if (e instanceof FenceError) throw e;
    throw new FenceError("keys_unavailable", (e as Error)?.message ?? String(e), { cause: e });
  }
  const what = `the proof of lease ${JSON.stringify(p.claims.lease)} token ${p.claims.fencingToken}`;
  let problem: Ed25519Problem | "" = staticProblem(pub, p.sig);
  if (problem === "") {
    try {
      problem = await checkEd25519(pub, p.signed, p.sig, await cryptoKey(pub));
    } catch {
      problem = "not_on_curve"; // the key did not import
    }
  }
  if (problem === "mismatch") throw new FenceError("bad_signature", `${what} does not verify with key ${JSON.stringify(p.kid)}`);
  if (problem !== "") {
    const whose = problem !== "s_not_canonical" && encodingProblem(pub) !== "" ? `key ${JSON.stringify(p.kid)}` : "the signature";
    throw new FenceError("bad_signature", `${what}: ${whose} is refused (${problem}: ${problemText[problem]})`);
  }
  if (options.issuer && p.claims.iss !== options.issuer) {
    throw new FenceError("wrong_issuer", `issued by ${JSON.stringify(p.claims.iss)}, want ${JSON.stringify(options.issuer)}`);
  }
  return p.claims;
}

const problemText: Record<Ed25519Problem, string> = {
  length: "wrong length",
  s_not_canonical: "S is not below the group order L",
  non_canonical: "a point encoding is not canonical",
  not_on_curve: "a point is not on the curve",
  small_order: "a point of small order",
  mismatch: "does not verify",
};

/** A Verifier checks proofs against fixed keys and issuer. */
export class Verifier {
  readonly keys: Keys;
  readonly issuer: string;
  /** issuer, if not empty, is the name every proof must carry. */
  constructor(keys: Keys, issuer = "") {
    this.keys = keys;
    this.issuer = issuer;
  }
  /** verify(proof, this.keys, {issuer: this.issuer}). */
  verify(proof: string, signal?: AbortSignal): Promise<Claims> {
    return verify(proof, this.keys, { issuer: this.issuer, ...(signal ? { signal } : {}) });
  }
}

/** A fetch-style handler that the Guard lets through, with the admitted proof's claims. */
export type FencedHandler = (request: Request, claims: Claims) => Response | Promise<Response>;

/**
 * A Guard keeps the highest fencing token it has verified per lease and
 * refuses a proof with a lower one: the writes of a deposed holder stop at
 * the sink. Its memory is the process's.
 */
export class Guard {
  readonly verifier: Verifier;
  readonly #high = new Map<string, number>();

  constructor(verifier: Verifier) {
    this.verifier = verifier;
  }

  /**
   * check verifies proof, requires it to be for lease, and admits it if its
   * token is at least the highest admitted for the lease, which it then
   * becomes. An equal token is admitted (one holder writes many times); a
   * lower one is "stale". A refused proof changes nothing.
   */
  async check(lease: string, proof: string | null | undefined, signal?: AbortSignal): Promise<Claims> {
    if (proof === undefined || proof === null || proof === "") throw new FenceError("missing", `send the holding's proof in the ${header} header`);
    const c = await this.verifier.verify(proof, signal);
    if (c.lease !== lease) throw new FenceError("other_lease", `the proof is for ${JSON.stringify(c.lease)}, the write for ${JSON.stringify(lease)}`);
    // Nothing awaited from here on: the comparison and the update are one step.
    const h = this.#high.get(lease) ?? 0;
    if (c.fencingToken < h) throw new FenceError("stale", `token ${c.fencingToken} of lease ${JSON.stringify(lease)}, but token ${h} has written`);
    this.#high.set(lease, c.fencingToken);
    return c;
  }

  /** The highest token admitted for lease; 0 if none. */
  highest(lease: string): number {
    return this.#high.get(lease) ?? 0;
  }

  /**
   * handler wraps a fetch-style handler: it runs only for requests whose
   * Leasesvc-Fence header holds a proof check admits for the lease leaseOf
   * names, and gets the claims. Refusals are plain-text answers with the
   * reason (and the Leasesvc-Fence-Reason header): 401 without a proof,
   * 403 malformed, forged, unknown-key, other-issuer or other-lease, 409
   * stale, 503 keys unreadable.
   */
  handler(leaseOf: string | ((request: Request) => string), next: FencedHandler): (request: Request) => Promise<Response> {
    return async (request: Request): Promise<Response> => {
      let claims: Claims;
      try {
        const lease = typeof leaseOf === "string" ? leaseOf : leaseOf(request);
        claims = await this.check(lease, request.headers.get(header), request.signal);
      } catch (e) {
        if (!(e instanceof FenceError)) throw e;
        return new Response(e.message + "\n", {
          status: e.status,
          headers: { "content-type": "text/plain; charset=utf-8", "leasesvc-fence-reason": e.reason },
        });
      }
      return next(request, claims);
    };
  }
}
