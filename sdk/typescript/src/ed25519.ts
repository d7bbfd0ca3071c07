/**
 * Ed25519 verification (RFC 8032) over WebCrypto, with the checks every
 * leasesvc verifier makes alike (docs/contract.md §17), whatever the
 * platform's Ed25519 accepts: WebCrypto on Node 20 is OpenSSL's, which
 * verifies cofactorless and takes small-order keys and R points (a key of
 * order 1, 2 or 4 with R = the identity and S = 0 "verifies" many
 * messages) and non-canonical encodings. So before WebCrypto is asked:
 * S < L; the public key A and the point R are canonical encodings
 * (y < p, and not x = 0 with the sign bit set) of points on the curve;
 * neither is one of the 8 small-order points.
 */
import type { webcrypto } from "node:crypto";

/** p = 2^255 − 19, the field's prime. */
const P = (1n << 255n) - 19n;
/** L = 2^252 + 27742317777372353535851937790883648493, the group's order. */
export const L = (1n << 252n) + 27742317777372353535851937790883648493n;

/** littleEndian reads bytes as an unsigned little-endian integer. */
function littleEndian(b: Uint8Array): bigint {
  let n = 0n;
  for (let i = b.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(b[i]!);
  return n;
}

/**
 * The y coordinates of the 8 points of small order (1, 2, 4 and 8): the
 * identity (y = 1), (0, −1), the two of order 4 (y = 0) and the four of
 * order 8. Each y stands for the point and its negation (the sign bit), so
 * the set also covers x = 0 with the sign bit set.
 */
const smallOrderY = new Set<bigint>([
  0n,
  1n,
  P - 1n,
  littleEndian(hex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")),
  littleEndian(hex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")),
]);

function hex(s: string): Uint8Array {
  const b = new Uint8Array(s.length / 2);
  for (let i = 0; i < b.length; i++) b[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return b;
}

/** d = −121665 / 121666 mod p, the curve's constant. */
const D = 37095705934669439343138083508754565189542113879843219016388785533085940283555n;

function modPow(b: bigint, e: bigint): bigint {
  let r = 1n;
  b %= P;
  for (; e > 0n; e >>= 1n, b = (b * b) % P) if (e & 1n) r = (r * b) % P;
  return r;
}

/**
 * Why a key or signature is refused, the first rule broken, in the order
 * of the project's shared vectors (fence/testdata/ed25519_vectors.json):
 * - "length": the key is not 32 bytes or the signature not 64;
 * - "s_not_canonical": S ≥ L;
 * - "non_canonical": the key or R has y ≥ p, or x = 0 with the sign bit set;
 * - "not_on_curve": the key or R has a y with no x;
 * - "small_order": the key or R is one of the 8 points P with [8]P = O;
 * - "mismatch": the signature does not verify.
 */
export type Ed25519Problem = "length" | "s_not_canonical" | "non_canonical" | "not_on_curve" | "small_order" | "mismatch";

/** yOf is the y of a point encoding, the sign bit cleared. */
function yOf(enc: Uint8Array): bigint {
  return littleEndian(enc) & ((1n << 255n) - 1n);
}

function nonCanonical(enc: Uint8Array): boolean {
  const y = yOf(enc);
  return y >= P || ((y === 1n || y === P - 1n) && (enc[31]! & 0x80) !== 0); // x = 0 has no negative
}

function onCurve(enc: Uint8Array): boolean {
  // x² = (y² − 1) / (d·y² + 1) has a solution iff (y² − 1)(d·y² + 1) is 0 or a square mod p (Euler's criterion).
  const y = yOf(enc) % P;
  const y2 = (y * y) % P;
  const uv = (((y2 - 1n + P) % P) * ((D * y2 + 1n) % P)) % P;
  return uv === 0n || modPow(uv, (P - 1n) / 2n) === 1n;
}

/** encodingProblem returns what is wrong with a 32-byte point encoding on its own, or "". */
export function encodingProblem(enc: Uint8Array): Ed25519Problem | "" {
  if (enc.length !== 32) return "length";
  if (nonCanonical(enc)) return "non_canonical";
  if (!onCurve(enc)) return "not_on_curve";
  if (smallOrderY.has(yOf(enc))) return "small_order";
  return "";
}

/** staticProblem is checkEd25519 without the final verification: every rule but mismatch. */
export function staticProblem(pub: Uint8Array, sig: Uint8Array): Ed25519Problem | "" {
  if (pub.length !== 32 || sig.length !== 64) return "length";
  if (littleEndian(sig.subarray(32)) >= L) return "s_not_canonical";
  const r = sig.subarray(0, 32);
  if (nonCanonical(pub) || nonCanonical(r)) return "non_canonical";
  if (!onCurve(pub) || !onCurve(r)) return "not_on_curve";
  if (smallOrderY.has(yOf(pub)) || smallOrderY.has(yOf(r))) return "small_order";
  return "";
}

/** importPublicKey makes the WebCrypto key of a 32-byte Ed25519 public key. */
export async function importPublicKey(pub: Uint8Array): Promise<webcrypto.CryptoKey> {
  return globalThis.crypto.subtle.importKey("raw", pub, { name: "Ed25519" }, false, ["verify"]);
}

/**
 * checkEd25519 returns "" when sig is pub's signature of message, else the
 * first rule broken; key, if given, is pub already imported.
 */
export async function checkEd25519(pub: Uint8Array, message: Uint8Array, sig: Uint8Array, key?: webcrypto.CryptoKey): Promise<Ed25519Problem | ""> {
  const p = staticProblem(pub, sig);
  if (p !== "") return p;
  try {
    return (await globalThis.crypto.subtle.verify("Ed25519", key ?? (await importPublicKey(pub)), sig, message)) ? "" : "mismatch";
  } catch {
    return "mismatch";
  }
}

/** verifyEd25519 reports whether sig is pub's signature of message (checkEd25519 returns ""). */
export async function verifyEd25519(pub: Uint8Array, message: Uint8Array, sig: Uint8Array, key?: webcrypto.CryptoKey): Promise<boolean> {
  return (await checkEd25519(pub, message, sig, key)) === "";
}
