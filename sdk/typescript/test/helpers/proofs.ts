/** Signing keys of the tests' own, to make proofs as the service does (and forge them). */
import { webcrypto } from "node:crypto";
import { fence } from "@leasesvc/client";

export interface TestKey {
  kid: string;
  jwk: fence.JWK;
  priv: webcrypto.CryptoKey;
  pub: Uint8Array;
}

export const b64u = (b: Uint8Array | string): string => Buffer.from(b).toString("base64url");

export async function newKey(): Promise<TestKey> {
  const kp = (await webcrypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"])) as webcrypto.CryptoKeyPair;
  const x = (await webcrypto.subtle.exportKey("jwk", kp.publicKey)).x!;
  const kid = await fence.keyId(x);
  return { kid, priv: kp.privateKey, pub: new Uint8Array(Buffer.from(x, "base64url")), jwk: { kty: "OKP", crv: "Ed25519", x, kid, alg: "EdDSA", use: "sig" } };
}

export function claims(lease: string, fencingToken: number, over: Partial<fence.Claims> = {}): fence.Claims {
  return { lease, fencingToken, holder: "agent-1", principal: "a@example.com", iat: 1_800_000_000, iss: "leasesvc", ...over };
}

/** signRaw signs header.payload as given (objects are JSON-encoded). */
export async function signRaw(k: TestKey, header: unknown, payload: unknown): Promise<string> {
  const signed = `${b64u(JSON.stringify(header))}.${b64u(JSON.stringify(payload))}`;
  const sig = new Uint8Array(await webcrypto.subtle.sign("Ed25519", k.priv, new TextEncoder().encode(signed)));
  return `${signed}.${b64u(sig)}`;
}

/** sign makes a proof of c under k, as the service does. */
export function sign(k: TestKey, c: fence.Claims): Promise<string> {
  return signRaw(k, { alg: "EdDSA", kid: k.kid, typ: fence.proofType }, c);
}

export function staticKeys(...keys: TestKey[]): fence.StaticKeys {
  return new fence.StaticKeys(new Map(keys.map((k) => [k.kid, k.pub])));
}
