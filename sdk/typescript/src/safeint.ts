/**
 * The numbers that order holdings and sessions, epochs and fencing tokens,
 * are bounded by JavaScript's exact integers (docs/contract.md §14,
 * Bounds): the service accepts and hands out none above 2^53 − 1
 * (Number.MAX_SAFE_INTEGER), because JSON.parse reads a larger one
 * rounded, and two tokens would then compare equal. A larger one from the
 * service is a protocol error; the SDK never sends one.
 */

/** The fields of the API that carry an epoch or a fencing token. */
const ordering = new Set(["epoch", "fencingToken", "checkpointToken"]);

/** How deep unsafeOrdering looks into a message (a resumed's leases, a problem's lease, a list's page). */
const maxDepth = 6;

/**
 * unsafeOrdering returns a description ("fencingToken 9007199254740992")
 * of the first epoch or fencing token in v, a JSON value as JSON.parse
 * read it, that is not an integer within 0 … 2^53 − 1; "" when there is
 * none.
 */
export function unsafeOrdering(v: unknown, depth = 0): string {
  if (v === null || typeof v !== "object" || depth > maxDepth) return "";
  if (Array.isArray(v)) {
    for (const x of v) {
      const bad = unsafeOrdering(x, depth + 1);
      if (bad !== "") return bad;
    }
    return "";
  }
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    if (typeof x === "number" && ordering.has(k) && !(Number.isSafeInteger(x) && x >= 0)) return `${k} ${x}`;
    const bad = unsafeOrdering(x, depth + 1);
    if (bad !== "") return bad;
  }
  return "";
}

/** protocolText is the end of the message of an error for what unsafeOrdering found. */
export function protocolText(bad: string): string {
  return `protocol error: ${bad} is not an integer within 0 … 2^53 − 1 (Number.MAX_SAFE_INTEGER): the service bounds epochs and fencing tokens there, and a larger one loses its precision in JSON`;
}

/** checkSendable throws a RangeError, before anything is sent, when the request m carries an epoch or fencing token above 2^53 − 1 (the service refuses it, and its digits are not the ones meant). */
export function checkSendable(what: string, m: Record<string, unknown>): void {
  for (const k of ordering) {
    const x = m[k];
    if (typeof x === "number" && !(Math.abs(x) <= Number.MAX_SAFE_INTEGER)) {
      throw new RangeError(`${what}: ${k} ${String(x)} is above 2^53 − 1 (Number.MAX_SAFE_INTEGER), the largest the service accepts`);
    }
  }
}
