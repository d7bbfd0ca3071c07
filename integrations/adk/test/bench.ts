/**
 * What the lease and the fence add to an ADK appendEvent on the Firestore
 * emulator (npm run bench; not part of npm test): appendEvent of a small
 * event with a state delta, through the fenced FirestoreSessionService
 * under a held session lease, and the same Firestore writes without lease
 * or fence (the service's fence replaced by a bare transaction).
 */
import type { Transaction } from "@google-cloud/firestore";
import { createEvent, createEventActions } from "@google/adk";
import { Client } from "@leasesvc/client";
import { FirestoreSessionService, Runs } from "../src/index.js";
import { AutoHold } from "./helpers/autohold.js";
import { newDb, scratch, startService, verifierOf } from "./helpers/env.js";

const n = Number(process.env["BENCH_EVENTS"] ?? 200);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const fmt = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms (n=${xs.length})`;

const svc = await startService();
const db = newDb();
const runs = new Runs(new Client(svc.url), { holder: "bench" });
const hold = new AutoHold(runs);
const prefix = scratch("adk-bench");
const fenced = new FirestoreSessionService({ db, verifier: verifierOf(svc.url), fencing: hold, collectionPrefix: prefix, fenceCollection: `${prefix}-fence` });
const bare = new FirestoreSessionService({ db, verifier: verifierOf(svc.url), fencing: hold, collectionPrefix: `${prefix}-bare` });
(bare.fence as { write: unknown }).write = <T>(_lease: string, body: (tx: Transaction) => Promise<T>): Promise<T> => db.runTransaction(body);
await fenced.fence.warm();

for (const [kind, s] of [["lease + fence", fenced], ["no lease, no fence", bare]] as const) {
  const session = await s.createSession({ appName: "bench", userId: "u", sessionId: "s" });
  const times: number[] = [];
  for (let i = 0; i < n + 10; i++) {
    const event = createEvent({ invocationId: "inv", author: "agent", content: { role: "model", parts: [{ text: `event ${i}` }] }, actions: createEventActions({ stateDelta: { count: i } }) });
    const t0 = performance.now();
    await s.appendEvent({ session, event });
    if (i >= 10) times.push(performance.now() - t0);
  }
  console.log(`ADK appendEvent, ${kind}: ${fmt(times)}`);
}
await hold.close();
await runs.close();
await svc.stop();
await db.terminate();
