import { type Lease, parseLease } from "./lease.js";
import { protocolText, unsafeOrdering } from "./safeint.js";

/**
 * The kind of a watch event: a change of holding (docs/contract.md §5), or
 * "lease", the lease as it is now, which every watch stream starts with and
 * sends again after a reconnect.
 */
export type EventType = "lease" | "acquired" | "released" | "expired" | "revoked" | "deleted";

/** One event of a watch stream. */
export interface LeaseEvent {
  /** The kind of change, or "lease" for the state now. */
  type: EventType;
  /** The lease as of the event; null on a "lease" event of a lease that never existed. */
  lease: Lease | null;
  /** On acquired with token > 1: the holder of token − 1. */
  previousHolder?: string;
  /** On acquired with token > 1: whether the previous holding ran out rather than ended. */
  previousExpired?: boolean;
  /** On revoked: the operator's reason; on deleted, why the service deleted it ("retention"). */
  reason?: string;
  /** On revoked and deleted: the operator (principal). */
  operator?: string;
  /** Backend time of the event (the lease's serverTime for a "lease" event). */
  eventTime?: Date;
  /** The SSE id, {name}/{fencingToken}/{type}: a repeated event keeps it. Empty on "lease" events. */
  id: string;
}

const changeTypes = new Set<string>(["acquired", "released", "expired", "revoked", "deleted"]);

/** parseEvent turns one Server-Sent Event of a watch stream into a LeaseEvent; it throws on one it cannot read. */
export function parseEvent(type: string, data: string, id: string): LeaseEvent {
  const raw: unknown = JSON.parse(data);
  const bad = unsafeOrdering(raw);
  if (bad !== "") throw new Error(`leasesvc watch: ${type} event: ${protocolText(bad)}`);
  if (type === "lease") {
    if (raw === null) return { type: "lease", lease: null, id };
    const lease = parseLease(raw);
    return { type: "lease", lease, eventTime: lease.serverTime, id };
  }
  if (!changeTypes.has(type) || raw === null || typeof raw !== "object") {
    throw new Error(`leasesvc watch: unknown event ${JSON.stringify(type)}`);
  }
  const o = raw as Record<string, unknown>;
  const lease = parseLease(o["lease"]);
  if (lease.name === "" || lease.fencingToken < 1) throw new Error(`leasesvc watch: ${type} event without lease name or token`);
  const ev: LeaseEvent = { type: type as EventType, lease, id };
  if (typeof o["previousHolder"] === "string") ev.previousHolder = o["previousHolder"];
  if (typeof o["previousExpired"] === "boolean") ev.previousExpired = o["previousExpired"];
  if (typeof o["reason"] === "string") ev.reason = o["reason"];
  if (typeof o["operator"] === "string") ev.operator = o["operator"];
  if (typeof o["eventTime"] === "string") ev.eventTime = new Date(o["eventTime"]);
  return ev;
}

/**
 * isNewer reports whether event b comes after event a of the same lease in
 * the order consumers use (docs/contract.md §5): by fencing token, and
 * within one token the start of a holding before its end, and its end
 * before the deletion of the lease (docs/contract.md §15). Keep the newest
 * event per lease and drop any event for which isNewer(kept, ev) is false:
 * duplicates and late arrivals (a reconnect can repeat events).
 */
export function isNewer(a: LeaseEvent, b: LeaseEvent): boolean {
  const ta = a.lease?.fencingToken ?? 0;
  const tb = b.lease?.fencingToken ?? 0;
  if (ta !== tb) return tb > ta;
  return rank(a) < rank(b);
}

function rank(e: LeaseEvent): number {
  if (e.type === "acquired") return 0;
  if (e.type === "lease" && e.lease?.held) return 0;
  if (e.type === "deleted") return 2;
  return 1;
}
