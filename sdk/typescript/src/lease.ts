/**
 * A lease as the service answered it (docs/contract.md §1). Every time in
 * it is the backend's: compare them with each other, never with a local
 * clock. The SDK never uses them, nor remainingMs, to decide when to stop
 * leading (see Elector).
 */
export interface Lease {
  /** The lease's name, such as "team-a.scheduler". */
  name: string;
  /** The current holder or, when held is false, the last one. */
  holder: string;
  /** Grows by exactly 1 with every new holding, never reused. Pass it with every write downstream. */
  fencingToken: number;
  /** The lease duration the holder asked for, in milliseconds. */
  ttlMs: number;
  /** Server time at which the current holding began. */
  acquireTime: Date;
  /** Server time of the last acquire or renew. */
  renewTime: Date;
  /** Server time at which the holding ends unless renewed. */
  expireTime: Date;
  /** serverTime < expireTime when the answer was computed. */
  held: boolean;
  /** expireTime − serverTime in milliseconds, never negative: a duration on the server's clock, not a local deadline. */
  remainingMs: number;
  /** The backend's time at which this answer was decided. */
  serverTime: Date;
  /** How many times the lease passed to a new holding. */
  transitions: number;
  /** The JSON object the holder attached ({} when none). */
  metadata: Record<string, unknown>;
  /** The authenticated principal that acquired the holding; empty without authentication. */
  principal: string;
  /** The operator who revoked the holding; empty unless revoked. */
  revokedBy: string;
  /** The reason the operator gave; empty unless revoked. */
  revokeReason: string;
  // The succession fields (docs/contract.md §8): each is zero (0, "", false, null) when the service answered none.
  /** The priority the current (or last) holding was acquired with, 0 … 1000. */
  priority: number;
  /** The JSON object a holding last wrote with a renew, release or transfer; null when none. It survives its holding: an acquire answers the checkpoint the new holder inherits. */
  checkpoint: Record<string, unknown> | null;
  /** The fencing token of the holding that wrote checkpoint; 0 without one. */
  checkpointToken: number;
  /** The holder the free lease is reserved for (the best waiting candidate after a holding ended, or a transfer's successor); empty when open to anyone or held. */
  reservedFor: string;
  /** Server time at which the reservation lapses at the latest; null without one. */
  reservedUntil: Date | null;
  /** A waiting candidate with a strictly higher priority asks the live holding to step down (preempt): checkpoint and release. Nothing is taken by force. */
  yieldRequested: boolean;
  /** The candidate the holding is asked to step down for; empty unless yieldRequested. */
  yieldTo: string;
  /** How many registered candidates wait for the lease. */
  candidates: number;
  /** The priority of the best of them (the one a reservation would name); null when none waits. */
  bestCandidatePriority: number | null;
  /** The holding is held through a session (docs/contract.md §14): it ends when its session's heartbeats stop. */
  session: boolean;
  /** The window of that session in milliseconds; 0 when not session-held. */
  sessionWindowMs: number;
  /**
   * The holding's fencing proof (docs/contract.md §17): a compact JWS the service signed, stating its lease,
   * fencingToken and holder. Only in the answers that start a holding for its holder (acquire, a session's
   * acquire and resume); absent elsewhere. Pass it, never the bare token, to whatever writes (the
   * Leasesvc-Fence header to an HTTP sink); keep it secret like a bearer token.
   */
  proof?: string;
}

/** One page of a list. */
export interface Page {
  /** Leases in ascending byte order of name. */
  leases: Lease[];
  /** Asks for the next page; empty on the last page. */
  nextPageToken: string;
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

function date(v: unknown): Date {
  return new Date(typeof v === "string" ? v : 0);
}

function object(v: unknown): Record<string, unknown> | null {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

/** parseTime reads an RFC 3339 time of the API; null when absent. */
export function parseTime(v: unknown): Date | null {
  return typeof v === "string" && v !== "" ? new Date(v) : null;
}

/** parseLease reads the API's JSON form of a lease; missing fields get zero values. */
export function parseLease(raw: unknown): Lease {
  const o = (raw !== null && typeof raw === "object" ? raw : {}) as Record<string, unknown>;
  const md = o["metadata"];
  return {
    name: str(o["name"]),
    holder: str(o["holder"]),
    fencingToken: num(o["fencingToken"]),
    ttlMs: num(o["ttlMs"]),
    acquireTime: date(o["acquireTime"]),
    renewTime: date(o["renewTime"]),
    expireTime: date(o["expireTime"]),
    held: o["held"] === true,
    remainingMs: num(o["remainingMs"]),
    serverTime: date(o["serverTime"]),
    transitions: num(o["transitions"]),
    metadata: md !== null && typeof md === "object" && !Array.isArray(md) ? (md as Record<string, unknown>) : {},
    principal: str(o["principal"]),
    revokedBy: str(o["revokedBy"]),
    revokeReason: str(o["revokeReason"]),
    priority: num(o["priority"]),
    checkpoint: object(o["checkpoint"]),
    checkpointToken: num(o["checkpointToken"]),
    reservedFor: str(o["reservedFor"]),
    reservedUntil: parseTime(o["reservedUntil"]),
    yieldRequested: o["yieldRequested"] === true,
    yieldTo: str(o["yieldTo"]),
    candidates: num(o["candidates"]),
    bestCandidatePriority: typeof o["bestCandidatePriority"] === "number" ? num(o["bestCandidatePriority"]) : null,
    session: o["session"] === true,
    sessionWindowMs: num(o["sessionWindowMs"]),
    ...(typeof o["proof"] === "string" && o["proof"] !== "" ? { proof: o["proof"] } : {}),
  };
}

const nameRE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** validName reports whether name is a valid lease name: 1–128 characters of [A-Za-z0-9._-], starting with a letter or digit. */
export function validName(name: string): boolean {
  return nameRE.test(name);
}
