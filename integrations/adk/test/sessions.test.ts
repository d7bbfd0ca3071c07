/**
 * FirestoreSessionService shows the behaviours of ADK's own
 * InMemorySessionService: the same calls against both give the same
 * answers (create, get with numRecentEvents and afterTimestamp, list with
 * order and paging, delete, state deltas with app:, user: and temp:
 * prefixes, an event appended again). A partial event is not stored, as
 * BaseSessionService says; InMemorySessionService still moves the
 * session's lastUpdateTime and the app's and user's state for one, which
 * this service does not (checked on its own below).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Firestore } from "@google-cloud/firestore";
import { type BaseSessionService, type Event, InMemorySessionService, type Session, createEvent, createEventActions } from "@google/adk";
import { Client } from "@leasesvc/client";
import { FirestoreSessionService, Runs, SessionStateError } from "../src/index.js";
import { AutoHold } from "./helpers/autohold.js";
import { type Service, newDb, scratch, skipReason, startService, verifierOf, windowMs } from "./helpers/env.js";

const skip = skipReason();
let svc: Service;
let db: Firestore;
let runs: Runs;
let hold: AutoHold;

/** A session as compared: JSON, without the times the services take from their own clocks. */
function norm(s: Session | undefined): unknown {
  if (s === undefined) return undefined;
  const j = JSON.parse(JSON.stringify(s)) as Record<string, unknown>;
  return { ...j, lastUpdateTime: (s.events.length > 0 ? s.lastUpdateTime : "creation") };
}

function ev(i: number, over: Partial<Event> = {}): Event {
  return createEvent({
    id: `e${i}`,
    invocationId: "inv-1",
    author: "agent",
    timestamp: 1_000 * i,
    content: { role: "model", parts: [{ text: `step ${i}` }] },
    actions: createEventActions({ stateDelta: { n: i, "app:x": i, "user:y": i, "temp:z": i } }),
    ...over,
  });
}

/** The script both services run; it returns every answer. */
async function script(s: BaseSessionService): Promise<unknown[]> {
  const out: unknown[] = [];
  const app = "app";
  out.push(norm(await s.createSession({ appName: app, userId: "u1", sessionId: "s1", state: { a: 1, "temp:t": 1 } })));
  out.push(norm(await s.createSession({ appName: app, userId: "u1", sessionId: "s2", state: { b: 2 } })));
  out.push(norm(await s.createSession({ appName: app, userId: "u2", sessionId: "s3" })));
  let s1 = (await s.getSession({ appName: app, userId: "u1", sessionId: "s1" }))!;
  for (let i = 1; i <= 5; i++) out.push(JSON.parse(JSON.stringify(await s.appendEvent({ session: s1, event: ev(i) }))));
  out.push(norm(s1), s1.state);
  // An event appended again with the id of a stored one replaces it, in its place.
  s1 = (await s.getSession({ appName: app, userId: "u1", sessionId: "s1" }))!;
  await s.appendEvent({ session: s1, event: ev(2, { content: { role: "model", parts: [{ text: "step 2, again" }] }, timestamp: 6_000 }) });
  out.push(norm(s1));
  for (const config of [undefined, { numRecentEvents: 2 }, { afterTimestamp: 3_000 }, { numRecentEvents: 3, afterTimestamp: 4_500 }, { afterTimestamp: 100_000 }, { numRecentEvents: 0 }]) {
    out.push(norm(await s.getSession({ appName: app, userId: "u1", sessionId: "s1", ...(config ? { config } : {}) })));
  }
  // app: keys are every session's of the app, user: keys every session's of the user.
  out.push((await s.getSession({ appName: app, userId: "u1", sessionId: "s2" }))!.state);
  out.push((await s.getSession({ appName: app, userId: "u2", sessionId: "s3" }))!.state);
  const s3 = (await s.getSession({ appName: app, userId: "u2", sessionId: "s3" }))!;
  await s.appendEvent({ session: s3, event: ev(7, { id: "e7" }) });
  for (const req of [{}, { userId: "u1" }, { userId: "nobody" }, { order: "asc" as const }, { order: "desc" as const }, { order: "desc" as const, limit: 2 }, { order: "desc" as const, limit: 2, page: 2 }, { order: "asc" as const, limit: 2, offset: 1 }, { order: "asc" as const, offset: 2 }]) {
    const l = await s.listSessions({ appName: app, ...req });
    const sessions = l.sessions.map((x) => ({ id: x.id, userId: x.userId, state: x.state, events: x.events, lastUpdateTime: x.id === "s2" ? "creation" : x.lastUpdateTime }));
    if (req.order === undefined) sessions.sort((a, b) => a.id.localeCompare(b.id));
    out.push({ ...l, sessions });
  }
  out.push(await s.listSessions({ appName: "other" }));
  await s.deleteSession({ appName: app, userId: "u1", sessionId: "s2" });
  out.push(norm(await s.getSession({ appName: app, userId: "u1", sessionId: "s2" })));
  await s.deleteSession({ appName: app, userId: "u1", sessionId: "never" });
  out.push(norm(await s.getSession({ appName: app, userId: "u1", sessionId: "never" })));
  out.push((await s.listSessions({ appName: app, userId: "u1" })).sessions.map((x) => x.id));
  return out;
}

describe("FirestoreSessionService behaves as InMemorySessionService", { skip: skip || false }, () => {
  before(async () => {
    svc = await startService();
    db = newDb();
    runs = new Runs(new Client(svc.url), { holder: "sessions-test", keeperOptions: { windowMs } });
    hold = new AutoHold(runs);
  });
  after(async () => {
    await hold?.close();
    await runs?.close();
    await svc?.stop();
    await db?.terminate();
  });

  test("the same calls give the same answers", async () => {
    const prefix = scratch("adk-sessions");
    const fs = new FirestoreSessionService({ db, verifier: verifierOf(svc.url), fencing: hold, collectionPrefix: prefix, fenceCollection: `${prefix}-fence` });
    await fs.fence.warm();
    const want = await script(new InMemorySessionService());
    const got = await script(fs);
    for (let i = 0; i < want.length; i++) assert.deepEqual(got[i], want[i], `answer ${i}`);
    assert.equal(got.length, want.length);
  });

  test("as DatabaseSessionService: a session that exists is not created again; app: and user: keys of a new state are shared", async () => {
    const prefix = scratch("adk-sessions");
    const fs = new FirestoreSessionService({ db, verifier: verifierOf(svc.url), fencing: hold, collectionPrefix: prefix, fenceCollection: `${prefix}-fence` });
    await fs.fence.warm();
    await fs.createSession({ appName: "app", userId: "u", sessionId: "s", state: { "app:k": 1, "user:k": 2, "temp:k": 3, k: 4 } });
    await assert.rejects(fs.createSession({ appName: "app", userId: "u", sessionId: "s" }), SessionStateError);
    const other = await fs.createSession({ appName: "app", userId: "u", sessionId: "t" });
    assert.deepEqual(other.state, { "app:k": 1, "user:k": 2 });
    await assert.rejects(fs.appendEvent({ session: { ...other, id: "missing" }, event: ev(1) }), SessionStateError);
    await fs.appendEvent({ session: other, event: ev(2, { partial: true }) });
    const again = await fs.getSession({ appName: "app", userId: "u", sessionId: "t" });
    assert.deepEqual(again?.events, []);
    assert.deepEqual(again?.state, { "app:k": 1, "user:k": 2 });
  });
});
