/**
 * FirestoreSessionService: an ADK session service on Firestore whose every
 * write (createSession, appendEvent, deleteSession) runs in one
 * transaction fenced by the session's lease (core/fenced.ts,
 * docs/contract.md §17). It behaves as ADK's InMemorySessionService does
 * (get with numRecentEvents and afterTimestamp, list with its paging and
 * order, state deltas with the app:, user: and temp: prefixes), and, as
 * ADK's DatabaseSessionService, refuses to create a session that exists and
 * keeps app: and user: keys of a new session's state in the app's and the
 * user's state.
 *
 * Layout (collections under collectionPrefix, default "adk"):
 * - "{prefix}-sessions": one document per session (id: SHA-256 of
 *   [appName, userId, sessionId]): appName, userId, id, the session's own
 *   state (JSON), lastUpdateTime, the next event's sequence number;
 * - its subcollection "events": one document per event (id: SHA-256 of
 *   the event's id), the event (JSON), its timestamp and sequence number;
 * - "{prefix}-app-state" and "{prefix}-user-state": the app's and the
 *   user's state (JSON).
 * Every query is an equality or an order on one field: no composite index.
 */
import { createHash, randomUUID } from "node:crypto";
import type { DocumentReference, DocumentSnapshot, Firestore, Query, Transaction } from "@google-cloud/firestore";
import {
  type AppendEventRequest,
  BaseSessionService,
  type CreateSessionRequest,
  type DeleteSessionRequest,
  type Event,
  type GetSessionRequest,
  type ListSessionsRequest,
  type ListSessionsResponse,
  type Session,
  State,
  createSession,
} from "@google/adk";
import type { fence } from "@leasesvc/client";
import { FirestoreFence } from "./core/fenced.js";
import { leaseName } from "./core/names.js";
import type { Fencing } from "./core/runs.js";

/** The lease prefix of sessions unless told otherwise: session s1 of user u1 of app a is lease "adk.session.a.u1.s1". */
export const defaultSessionPrefix = "adk.session";

/** The collection prefix unless told otherwise. */
export const defaultCollectionPrefix = "adk";

/** The most events one fenced transaction of deleteSession deletes; a longer session is deleted in several. */
export const deleteBatch = 400;

/** A session's key. */
export interface SessionKey {
  appName: string;
  userId: string;
  sessionId: string;
}

/** Options of FirestoreSessionService. */
export interface FirestoreSessionServiceOptions {
  /** The database. */
  db: Firestore;
  /** Verifies proofs (docs/contract.md §17). */
  verifier: fence.Verifier;
  /** Hands out the proof of the current holding of a session: the Runs that runs the sessions. */
  fencing: Fencing;
  /** The lease prefix of sessions. Default "adk.session". */
  sessionPrefix?: string;
  /** The prefix of the collections. Default "adk". */
  collectionPrefix?: string;
  /** The collection of the fencing tokens. Default "leasesvc-fence" (the Go package fence/firestorefence's). */
  fenceCollection?: string;
}

/** A session (or an event of it) the service was asked to write does not exist, or exists when it was asked to create it. */
export class SessionStateError extends Error {
  override readonly name = "SessionStateError";
}

interface SessionDoc {
  appName: string;
  userId: string;
  id: string;
  state: string;
  lastUpdateTime: number;
  nextSeq: number;
}

interface EventDoc {
  event: string;
  timestamp: number;
  seq: number;
}

function docId(...parts: string[]): string {
  return createHash("sha256").update(JSON.stringify(parts), "utf8").digest("hex");
}

function parseState(s: unknown): Record<string, unknown> {
  if (typeof s !== "string" || s === "") return {};
  return JSON.parse(s) as Record<string, unknown>;
}

function str(v: unknown, what: string): string {
  if (typeof v !== "string" || v === "") throw new TypeError(`leasesvc FirestoreSessionService: ${what} must be a non-empty string, got ${JSON.stringify(v)}`);
  return v;
}

/** splitState splits a state delta into the app's, the user's and the session's own keys; temp: keys go nowhere. */
function splitState(state: Record<string, unknown>): { app: Record<string, unknown>; user: Record<string, unknown>; own: Record<string, unknown> } {
  const app: Record<string, unknown> = {};
  const user: Record<string, unknown> = {};
  const own: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(state)) {
    if (k.startsWith(State.APP_PREFIX)) app[k.slice(State.APP_PREFIX.length)] = v;
    else if (k.startsWith(State.USER_PREFIX)) user[k.slice(State.USER_PREFIX.length)] = v;
    else if (!k.startsWith(State.TEMP_PREFIX)) own[k] = v;
  }
  return { app, user, own };
}

/** mergeStates is the session's own state with the app's (app:) and the user's (user:) keys over it, as ADK merges them. */
function mergeStates(app: Record<string, unknown>, user: Record<string, unknown>, own: Record<string, unknown>): Record<string, unknown> {
  const m: Record<string, unknown> = structuredClone(own);
  for (const [k, v] of Object.entries(app)) m[State.APP_PREFIX + k] = v;
  for (const [k, v] of Object.entries(user)) m[State.USER_PREFIX + k] = v;
  return m;
}

/** FirestoreSessionService is an ADK session service on Firestore, fenced by each session's lease, as the module's doc says. */
export class FirestoreSessionService extends BaseSessionService {
  readonly db: Firestore;
  /** The fence its writes go through. */
  readonly fence: FirestoreFence;
  readonly sessionPrefix: string;
  readonly #sessions: string;
  readonly #app: string;
  readonly #user: string;

  constructor(o: FirestoreSessionServiceOptions) {
    super();
    this.db = o.db;
    this.fence = new FirestoreFence(o);
    this.sessionPrefix = o.sessionPrefix ?? defaultSessionPrefix;
    leaseName(this.sessionPrefix, "x");
    const p = o.collectionPrefix ?? defaultCollectionPrefix;
    this.#sessions = `${p}-sessions`;
    this.#app = `${p}-app-state`;
    this.#user = `${p}-user-state`;
  }

  /** The lease that stands for a session. */
  leaseOf(key: SessionKey): string {
    return leaseName(this.sessionPrefix, key.appName, key.userId, key.sessionId);
  }

  /** Stores the current holding's token for the session before a run reads it (FirestoreFence.fenceFirst). */
  async fenceFirst(key: SessionKey): Promise<void> {
    await this.fence.fenceFirst(this.leaseOf(key));
  }

  #sessionRef(k: SessionKey): DocumentReference {
    return this.db.collection(this.#sessions).doc(docId(k.appName, k.userId, k.sessionId));
  }

  #appRef(appName: string): DocumentReference {
    return this.db.collection(this.#app).doc(docId(appName));
  }

  #userRef(appName: string, userId: string): DocumentReference {
    return this.db.collection(this.#user).doc(docId(appName, userId));
  }

  async #sharedStates(appName: string, userId: string): Promise<{ app: Record<string, unknown>; user: Record<string, unknown> }> {
    const [a, u] = await this.db.getAll(this.#appRef(appName), this.#userRef(appName, userId));
    return { app: parseState(a!.get("state")), user: parseState(u!.get("state")) };
  }

  /**
   * Creates the session, fenced by its lease: the caller must run it
   * (LeasedRunner.createSession generates the id and holds the lease
   * around it). A session that exists is a SessionStateError.
   */
  async createSession(req: CreateSessionRequest): Promise<Session> {
    const appName = str(req.appName, "appName");
    const userId = str(req.userId, "userId");
    const id = req.sessionId || randomUUID();
    const key = { appName, userId, sessionId: id };
    const { app, user, own } = splitState(req.state ?? {});
    const now = Date.now();
    const ref = this.#sessionRef(key);
    const appRef = this.#appRef(appName);
    const userRef = this.#userRef(appName, userId);
    const states = await this.fence.write(this.leaseOf(key), async (tx: Transaction) => {
      const [s, a, u] = await tx.getAll(ref, appRef, userRef);
      if (s!.exists) throw new SessionStateError(`leasesvc FirestoreSessionService: session ${JSON.stringify(id)} of user ${JSON.stringify(userId)} of app ${JSON.stringify(appName)} already exists`);
      const appState = { ...parseState(a!.get("state")), ...app };
      const userState = { ...parseState(u!.get("state")), ...user };
      if (Object.keys(app).length > 0) tx.set(appRef, { appName, state: JSON.stringify(appState) });
      if (Object.keys(user).length > 0) tx.set(userRef, { appName, userId, state: JSON.stringify(userState) });
      tx.set(ref, { appName, userId, id, state: JSON.stringify(own), lastUpdateTime: now, nextSeq: 0 } satisfies SessionDoc);
      return { appState, userState };
    });
    return createSession({ id, appName, userId, state: mergeStates(states.appState, states.userState, own), events: [], lastUpdateTime: now });
  }

  /** The session with its events (numRecentEvents, then afterTimestamp, as InMemorySessionService applies them) and merged state; undefined if none. */
  async getSession(req: GetSessionRequest): Promise<Session | undefined> {
    const key = { appName: req.appName, userId: req.userId, sessionId: req.sessionId };
    const ref = this.#sessionRef(key);
    const snap = await ref.get();
    if (!snap.exists) return undefined;
    const d = snap.data() as SessionDoc;
    const n = req.config?.numRecentEvents;
    let q: Query = ref.collection("events");
    q = n ? q.orderBy("seq", "desc").limit(n) : q.orderBy("seq", "asc");
    const evSnap = await q.get();
    let events = evSnap.docs.map((e) => JSON.parse((e.data() as EventDoc).event) as Event);
    if (n) events.reverse();
    const after = req.config?.afterTimestamp;
    if (after) {
      let i = events.length - 1;
      while (i >= 0 && events[i]!.timestamp >= after) i--;
      if (i >= 0) events = events.slice(i + 1);
    }
    const { app, user } = await this.#sharedStates(d.appName, d.userId);
    return createSession({ id: d.id, appName: d.appName, userId: d.userId, state: mergeStates(app, user, parseState(d.state)), events, lastUpdateTime: d.lastUpdateTime });
  }

  /** The sessions of an app (of one user, if given), without state or events, ordered and paged as InMemorySessionService does. */
  async listSessions(req: ListSessionsRequest): Promise<ListSessionsResponse> {
    let q: Query = this.db.collection(this.#sessions).where("appName", "==", req.appName);
    if (req.userId !== undefined) q = q.where("userId", "==", req.userId);
    const all = (await q.get()).docs.map((s) => {
      const d = s.data() as SessionDoc;
      return createSession({ id: d.id, appName: d.appName, userId: d.userId, state: {}, events: [], lastUpdateTime: d.lastUpdateTime });
    });
    const { limit, offset, page, order } = req;
    if (order === "asc") all.sort((a, b) => a.lastUpdateTime - b.lastUpdateTime || a.id.localeCompare(b.id));
    else if (order === "desc") all.sort((a, b) => b.lastUpdateTime - a.lastUpdateTime || a.id.localeCompare(b.id));
    const totalItems = all.length;
    if (limit === undefined) {
      if (totalItems === 0) return { sessions: [], page: 1, limit: 0, totalItems: 0, totalPages: 0 };
      return { sessions: offset ? all.slice(offset) : all, page: 1, limit: totalItems, totalItems, totalPages: 1 };
    }
    const totalPages = limit === 0 || totalItems === 0 ? 0 : Math.ceil(totalItems / limit);
    const start = page !== undefined ? (page - 1) * limit : (offset ?? 0);
    const effectivePage = page !== undefined ? page : limit === 0 ? 1 : Math.floor(start / limit) + 1;
    return { sessions: all.slice(start, start + limit), page: effectivePage, limit, totalItems, totalPages };
  }

  /** Deletes the session and its events, fenced by its lease; a session that does not exist is no error. */
  async deleteSession(req: DeleteSessionRequest): Promise<void> {
    const key = { appName: req.appName, userId: req.userId, sessionId: req.sessionId };
    const ref = this.#sessionRef(key);
    const events = ref.collection("events");
    for (;;) {
      const n = await this.fence.write(this.leaseOf(key), async (tx) => {
        const evs = await tx.get(events.limit(deleteBatch));
        const s = await tx.get(ref);
        for (const e of evs.docs) tx.delete(e.ref);
        if (evs.size < deleteBatch && s.exists) tx.delete(ref);
        return evs.size;
      });
      if (n < deleteBatch) return;
    }
  }

  /**
   * Appends event to the session, fenced by its lease, in one transaction
   * with the state delta (app: and user: keys to the app's and the user's
   * state, temp: keys nowhere) and lastUpdateTime; an event with the id of
   * a stored one replaces it. Then it updates session as
   * InMemorySessionService does. A partial event is not stored.
   */
  override async appendEvent({ session, event }: AppendEventRequest): Promise<Event> {
    if (event.partial) return event;
    const key = { appName: session.appName, userId: session.userId, sessionId: session.id };
    const delta = splitState((event.actions?.stateDelta ?? {}) as Record<string, unknown>);
    const stored = { ...event, actions: { ...event.actions, stateDelta: Object.fromEntries(Object.entries(event.actions?.stateDelta ?? {}).filter(([k]) => !k.startsWith(State.TEMP_PREFIX))) } };
    const body = JSON.stringify(stored);
    const ref = this.#sessionRef(key);
    const evRef = ref.collection("events").doc(docId(str(event.id, "event.id")));
    const appRef = this.#appRef(key.appName);
    const userRef = this.#userRef(key.appName, key.userId);
    const shared = Object.keys(delta.app).length > 0 || Object.keys(delta.user).length > 0;
    await this.fence.write(this.leaseOf(key), async (tx) => {
      const snaps: DocumentSnapshot[] = await tx.getAll(ref, evRef, ...(shared ? [appRef, userRef] : []));
      const [s, e, a, u] = snaps;
      if (!s!.exists) throw new SessionStateError(`leasesvc FirestoreSessionService: session ${JSON.stringify(key.sessionId)} not found for appendEvent`);
      const d = s!.data() as SessionDoc;
      const seq = e!.exists ? (e!.data() as EventDoc).seq : d.nextSeq;
      tx.set(evRef, { event: body, timestamp: event.timestamp, seq } satisfies EventDoc);
      tx.update(ref, { state: JSON.stringify({ ...parseState(d.state), ...delta.own }), lastUpdateTime: event.timestamp, nextSeq: e!.exists ? d.nextSeq : d.nextSeq + 1 });
      if (Object.keys(delta.app).length > 0) tx.set(appRef, { appName: key.appName, state: JSON.stringify({ ...parseState(a!.get("state")), ...delta.app }) });
      if (Object.keys(delta.user).length > 0) tx.set(userRef, { appName: key.appName, userId: key.userId, state: JSON.stringify({ ...parseState(u!.get("state")), ...delta.user }) });
    });
    await super.appendEvent({ session, event });
    session.lastUpdateTime = event.timestamp;
    return event;
  }
}
