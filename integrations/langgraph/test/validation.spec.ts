/**
 * LangGraph's own conformance suite for checkpoint savers
 * (@langchain/langgraph-checkpoint-validation) against FirestoreSaver on
 * the Firestore emulator, every write fenced by a lease of the real
 * leasesvc binary. Run by vitest (npm test), the suite's runner.
 */
import { Client } from "@leasesvc/client";
import type { Firestore } from "@google-cloud/firestore";
import { validate } from "@langchain/langgraph-checkpoint-validation";
import { FirestoreSaver, Runs } from "../src/index.js";
import { AutoHold } from "./helpers/autohold.js";
import { type Service, newDb, scratch, skipReason, startService, verifierOf, windowMs } from "./helpers/env.js";

const skip = skipReason();
if (skip !== "") throw new Error(`the checkpoint validation suite cannot run: ${skip}`);

let svc: Service;
let db: Firestore;
let runs: Runs;
const holds = new Map<FirestoreSaver, AutoHold>();

validate<FirestoreSaver>({
  checkpointerName: "FirestoreSaver",
  beforeAllTimeout: 60_000,
  async beforeAll() {
    svc = await startService();
    db = newDb();
    runs = new Runs(new Client(svc.url), { holder: "validation", keeperOptions: { windowMs } });
  },
  async afterAll() {
    await runs.close();
    await svc.stop();
    await db.terminate();
  },
  async createCheckpointer() {
    const prefix = scratch("lg-validate");
    const fencing = new AutoHold(runs);
    const saver = new FirestoreSaver({ db, verifier: verifierOf(svc.url), fencing, collectionPrefix: prefix, fenceCollection: `${prefix}-fence` });
    holds.set(saver, fencing);
    await saver.fence.warm();
    return saver;
  },
  async destroyCheckpointer(saver: FirestoreSaver) {
    await holds.get(saver)?.close();
    holds.delete(saver);
  },
});
