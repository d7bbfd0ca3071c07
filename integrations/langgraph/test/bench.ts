/**
 * What the lease and the fence add to a LangGraph step on the Firestore
 * emulator (npm run bench; not part of npm test): a chain of 20 nodes that
 * do nothing, run through LeasedGraph with the fenced FirestoreSaver, and
 * the same graph and the same Firestore writes without lease or fence
 * (the saver's fence replaced by a bare transaction). A step is the time
 * from one node's start to the next's: its checkpoint and writes,
 * durability "sync". Also the run's own cost: acquire, fence first, release.
 */
import type { Transaction } from "@google-cloud/firestore";
import { Client } from "@leasesvc/client";
import { FirestoreSaver, LeasedGraph, Runs } from "../src/index.js";
import { chain } from "./helpers/graph.js";
import { newDb, scratch, startService, verifierOf } from "./helpers/env.js";

const steps = 20;
const runsEach = Number(process.env["BENCH_RUNS"] ?? 10);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}
const fmt = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms (n=${xs.length})`;

const svc = await startService();
const db = newDb();
const runs = new Runs(new Client(svc.url), { holder: "bench" });
const prefix = scratch("lg-bench");
const fenced = new FirestoreSaver({ db, verifier: verifierOf(svc.url), fencing: runs, collectionPrefix: prefix, fenceCollection: `${prefix}-fence` });
const bare = new FirestoreSaver({ db, verifier: verifierOf(svc.url), fencing: runs, collectionPrefix: `${prefix}-bare` });
(bare.fence as { write: unknown }).write = <T>(_lease: string, body: (tx: Transaction) => Promise<T>): Promise<T> => db.runTransaction(body);
await fenced.fence.warm();

let last = 0;
let samples: number[] = [];
const step = async (): Promise<void> => {
  const now = performance.now();
  if (last > 0) samples.push(now - last);
  last = now;
};
const withLease = new LeasedGraph(chain(steps, "w", step, fenced), runs);
const without = chain(steps, "o", step, bare);
const result: Record<string, number[]> = { with: [], without: [], run: [] };
for (let i = 0; i < runsEach + 1; i++) {
  for (const kind of ["with", "without"] as const) {
    samples = [];
    last = 0;
    const t0 = performance.now();
    if (kind === "with") await withLease.invoke({ log: [] }, { configurable: { thread_id: `b${i}` } });
    else await without.invoke({ log: [] }, { configurable: { thread_id: `b${i}` }, durability: "sync" });
    if (i > 0) result[kind]!.push(...samples); // the first round warms up
    if (kind === "with" && i > 0) result["run"]!.push(performance.now() - t0);
  }
  const t1 = performance.now();
  const r = await runs.begin(withLease.leaseOf(`r${i}`));
  await fenced.fenceFirst(`r${i}`);
  await r.end();
  if (i > 0) result["run"]!.push(performance.now() - t1);
}
result["run"] = result["run"]!.filter((_, k) => k % 2 === 1);
console.log(`LangGraph step, lease + fence: ${fmt(result["with"]!)}`);
console.log(`LangGraph step, no lease, no fence: ${fmt(result["without"]!)}`);
console.log(`run overhead (acquire, fence first, release): ${fmt(result["run"]!)}`);
await runs.close();
await svc.stop();
await db.terminate();
