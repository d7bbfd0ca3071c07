/**
 * An ADK replica in its own process (the freeze and kill tests): it creates
 * session REPLICA.session of user "u" if needed and runs a message through
 * a Steps agent of REPLICA.steps steps of REPLICA.stepMs each, printing
 * {"step": i} after each, and {"error", "reason"} or {"done"} at the end.
 * With REPLICA.pauseAtTx its nth Firestore transaction waits for a line on
 * stdin ({"paused": n}).
 */
import { pausingAt } from "./helpers/child.js";
import { newDb } from "./helpers/env.js";
import { pause, replica, send } from "./helpers/agent.js";

const cfg = JSON.parse(process.env["REPLICA"] ?? "{}") as { url: string; prefix: string; session: string; who: string; steps: number; stepMs: number; pauseAtTx?: number };
const out = (o: Record<string, unknown>): void => void process.stdout.write(JSON.stringify(o) + "\n");
const paused = cfg.pauseAtTx ? pausingAt(newDb(), cfg.pauseAtTx, out) : undefined;
const db = paused?.db ?? newDb();
const r = replica(cfg.url, db, cfg.prefix, cfg.who, cfg.steps, async (i, signal) => {
  out({ stepping: i });
  await pause(cfg.stepMs, signal);
  out({ step: i, at: performance.now() });
});
try {
  out({ starting: true });
  await send(r, "u", cfg.session, `hello from ${cfg.who}`);
  out({ done: true });
} catch (err) {
  const e = err as { name?: string; reason?: string; message?: string };
  out({ error: e.name ?? "Error", reason: e.reason ?? "", message: e.message ?? String(err) });
}
await paused?.settled();
await r.close();
process.exit(0);
