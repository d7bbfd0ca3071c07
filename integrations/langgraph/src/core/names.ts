/**
 * Lease names for framework threads and sessions (docs/contract.md §1: 1–128
 * characters of [A-Za-z0-9._-], starting with a letter or digit).
 *
 * A name is the prefix and each id joined by dots. An id of 1–48 characters
 * of [A-Za-z0-9_-] that starts with a letter or digit stands as it is; any
 * other id (dots, slashes, spaces, non-ASCII, empty, longer, or starting with
 * "-" or "_") stands as "_" and the first 32 hex digits (128 bits) of its
 * SHA-256. The two forms never meet: a plain id never starts with "_". When
 * the whole name would still pass 128 characters, the ids together stand as
 * one hashed part. So the name of a thread is a function of its ids alone,
 * the same on every replica, and two ids meet on one name only by a SHA-256
 * collision.
 */
import { createHash } from "node:crypto";

/** The longest id that stands in a lease name as it is. */
export const maxPlainId = 48;

/** The longest prefix accepted (it leaves room for one hashed part). */
export const maxPrefix = 90;

const plainId = /^[A-Za-z0-9][A-Za-z0-9_-]*$/;
const namePattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** hashed returns "_" and the first 32 hex digits of the SHA-256 of s. */
function hashed(s: string): string {
  return "_" + createHash("sha256").update(s, "utf8").digest("hex").slice(0, 32);
}

/** idPart returns how id stands in a lease name: itself when plain, else hashed. */
export function idPart(id: string): string {
  if (typeof id !== "string") throw new TypeError(`leasesvc: an id must be a string, got ${typeof id}`);
  return id.length <= maxPlainId && plainId.test(id) ? id : hashed(id);
}

/**
 * checkPrefix throws a RangeError unless prefix is a valid lease name of at
 * most maxPrefix characters that does not begin with "leasesvc." (the
 * service's own names).
 */
export function checkPrefix(prefix: string): string {
  if (typeof prefix !== "string" || prefix.length > maxPrefix || !namePattern.test(prefix) || prefix.endsWith(".")) {
    throw new RangeError(`leasesvc: lease prefix ${JSON.stringify(prefix)} must be 1–${maxPrefix} characters of [A-Za-z0-9._-], start with a letter or digit and not end with "."`);
  }
  if (prefix.startsWith("leasesvc.")) throw new RangeError(`leasesvc: lease prefix ${JSON.stringify(prefix)} is the service's own (leasesvc.)`);
  return prefix;
}

/** leaseName returns the lease name of ids under prefix, as the module's doc says. */
export function leaseName(prefix: string, ...ids: string[]): string {
  checkPrefix(prefix);
  if (ids.length === 0) throw new RangeError("leasesvc: leaseName needs at least one id");
  const name = [prefix, ...ids.map(idPart)].join(".");
  if (name.length <= 128) return name;
  return `${prefix}.${hashed(JSON.stringify(ids))}`;
}
