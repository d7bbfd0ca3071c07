/**
 * Exactly once with leader election and fencing: 5 agents (child
 * processes), 1,000 tasks, a fencing sink that refuses any token lower than
 * the highest it has seen, and the leader killed (SIGKILL) twice while it
 * works. The run passes when every task was done once: 0 duplicate tasks,
 * 0 stale writes accepted.
 *
 *   npm run build && npm run build:test
 *   LEASESVC_URL=http://127.0.0.1:8080 node build/examples/exactly-once.js
 *
 * It prints one JSON summary line and exits 0 on success, 1 otherwise.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { Client, Elector } from "@leasesvc/client";

/** A write the sink accepted. */
interface Accepted {
  task: number;
  token: number;
  holder: string;
}

/**
 * FencingSink is the downstream system: it hands out the next task and
 * records results, and refuses any request whose fencing token is lower than
 * the highest it has seen. A claim presents the token too, so a new leader
 * fences off the old one before it reads anything.
 */
export class FencingSink {
  readonly tasks: number;
  highest = 0;
  readonly done = new Map<number, number>(); // task → token that completed it
  readonly accepted: Accepted[] = [];
  duplicates = 0;
  staleAccepted = 0;
  staleRejected = 0;
  /** The holder that presented the highest token: the leader as the sink sees it. */
  leader = "";

  constructor(tasks: number) {
    this.tasks = tasks;
  }

  /** fence admits token, or reports it stale. */
  #fence(token: number, holder: string): boolean {
    if (token < this.highest) {
      this.staleRejected++;
      return false;
    }
    if (token > this.highest) {
      this.highest = token;
      this.leader = holder;
    }
    return true;
  }

  /** claim returns up to n tasks not yet done (none: all done), or undefined when token is stale. */
  claim(token: number, holder: string, n = 1): number[] | undefined {
    if (!this.#fence(token, holder)) return undefined;
    const out: number[] = [];
    for (let t = 0; t < this.tasks && out.length < n; t++) if (!this.done.has(t)) out.push(t);
    return out;
  }

  /** complete records the result of task, unless token is stale. */
  complete(task: number, token: number, holder: string): boolean {
    // An independent check of what "stale" means: lower than a token
    // already accepted for any write.
    const maxAccepted = this.accepted.reduce((m, a) => Math.max(m, a.token), 0);
    if (!this.#fence(token, holder)) return false;
    if (token < maxAccepted) this.staleAccepted++;
    if (this.done.has(task)) this.duplicates++;
    this.done.set(task, token);
    this.accepted.push({ task, token, holder });
    return true;
  }

  /** listen serves the sink over HTTP on a free loopback port; resolves to its URL. */
  async listen(): Promise<{ url: string; close: () => Promise<void> }> {
    const server = createServer((req, res) => void this.#serve(req, res));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () =>
        new Promise<void>((r) => {
          server.closeAllConnections();
          server.close(() => r());
        }),
    };
  }

  async #serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = "";
    for await (const chunk of req) raw += String(chunk);
    const b = JSON.parse(raw || "{}") as { token?: number; task?: number; holder?: string };
    const token = Number(b.token);
    const holder = String(b.holder ?? "");
    let status = 200;
    let body: unknown = {};
    if (req.url === "/claim") {
      const tasks = this.claim(token, holder, 10);
      if (tasks === undefined) status = 409;
      else body = { tasks };
    } else if (req.url === "/complete") {
      if (!this.complete(Number(b.task), token, holder)) status = 409;
    } else {
      status = 404;
    }
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function post(url: string, body: unknown, signal: AbortSignal): Promise<{ status: number; body: { tasks?: number[] } }> {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });
  return { status: res.status, body: (await res.json()) as { tasks?: number[] } };
}

/** agent campaigns for the lease and, while it leads, does tasks with its fencing token on every write. */
async function agent(): Promise<void> {
  const env = (k: string): string => process.env[k] ?? "";
  const sink = env("SINK_URL");
  const holder = env("HOLDER");
  const stop = new AbortController();
  process.on("SIGTERM", () => stop.abort());
  const elector = new Elector(new Client(env("LEASESVC_URL")), env("LEASE_NAME"), {
    holder,
    ttlMs: 2000,
    onStartedLeading: async (signal, token) => {
      while (!signal.aborted) {
        try {
          const claim = await post(sink + "/claim", { token, holder }, signal);
          if (claim.status !== 200) return; // fenced off: a newer leader exists
          const tasks = claim.body.tasks ?? [];
          if (tasks.length === 0) {
            await sleep(50); // all done: idle while leading
            continue;
          }
          for (const task of tasks) {
            await sleep(1); // the work
            if (signal.aborted) return; // stop acting the moment leadership ends
            const done = await post(sink + "/complete", { task, token, holder }, signal);
            if (done.status !== 200) return; // fenced off
          }
        } catch {
          if (signal.aborted) return;
          await sleep(10);
        }
      }
    },
  });
  await elector.run(stop.signal);
}

/** main runs the sink and 5 agents, kills the leader twice, and checks the outcome. */
async function main(): Promise<number> {
  const url = process.env["LEASESVC_URL"];
  if (!url) {
    process.stderr.write("exactly-once: set LEASESVC_URL to a running leasesvc (go run ./cmd/leasesvc)\n");
    return 2;
  }
  const tasks = Number(process.env["TASKS"] ?? "1000");
  const sink = new FencingSink(tasks);
  const served = await sink.listen();
  const lease = `example.exactly-once.${process.pid}.${Date.now()}`;
  const self = fileURLToPath(import.meta.url);
  const agents = new Map<string, ChildProcess>();
  const logs = new Map<string, string>();
  for (let i = 0; i < 5; i++) {
    const holder = `agent-${i}`;
    const p = spawn(process.execPath, [self, "agent"], {
      env: { ...process.env, SINK_URL: served.url, HOLDER: holder, LEASE_NAME: lease },
      stdio: ["ignore", "ignore", "pipe"],
    });
    logs.set(holder, "");
    p.stderr!.on("data", (b: Buffer) => logs.set(holder, logs.get(holder) + b.toString()));
    agents.set(holder, p);
  }
  const killed: Array<{ holder: string; token: number; afterTasks: number }> = [];
  const deadline = Date.now() + 120_000;
  try {
    while (sink.done.size < tasks && Date.now() < deadline) {
      const threshold = killed.length === 0 ? tasks * 0.3 : killed.length === 1 ? tasks * 0.65 : Infinity;
      if (sink.done.size >= threshold) {
        const victim = agents.get(sink.leader);
        if (victim && victim.exitCode === null && victim.signalCode === null) {
          killed.push({ holder: sink.leader, token: sink.highest, afterTasks: sink.done.size });
          victim.kill("SIGKILL"); // a crash: no release, the lease runs out
        }
      }
      await sleep(2);
    }
  } finally {
    for (const p of agents.values()) if (p.exitCode === null && p.signalCode === null) p.kill("SIGTERM");
    await Promise.all([...agents.values()].map((p) => (p.exitCode !== null || p.signalCode !== null ? undefined : new Promise((r) => p.once("exit", r)))));
    await served.close();
  }
  const perLeader = new Map<string, number>();
  for (const a of sink.accepted) perLeader.set(`${a.holder}#${a.token}`, (perLeader.get(`${a.holder}#${a.token}`) ?? 0) + 1);
  const summary = {
    tasks,
    completed: sink.done.size,
    duplicates: sink.duplicates,
    staleAccepted: sink.staleAccepted,
    staleRejected: sink.staleRejected,
    kills: killed,
    terms: Object.fromEntries(perLeader),
  };
  process.stdout.write(JSON.stringify(summary) + "\n");
  const ok = summary.completed === tasks && summary.duplicates === 0 && summary.staleAccepted === 0 && killed.length === 2;
  if (!ok) for (const [h, log] of logs) if (log) process.stderr.write(`--- ${h}\n${log}`);
  return ok ? 0 : 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  (process.argv[2] === "agent" ? agent().then(() => 0) : main()).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`exactly-once: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
