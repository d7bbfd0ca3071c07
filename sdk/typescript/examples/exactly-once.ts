/**
 * Exactly once with leader election and fencing proofs: 5 agents (child
 * processes), 1,000 tasks, a sink that admits a request only with a proof
 * the service signed (docs/contract.md §17) whose token is at least the
 * highest it has admitted (fence.Guard over the service's JWKS), and the
 * leader killed (SIGKILL) twice while it works. Midway the run forges two
 * writes with a far higher token, as an agent that invents or copies a
 * number would: a bare number and a JWS under a key the service never had.
 * The run passes when every task was done once (0 duplicate tasks, 0 stale
 * writes accepted), both forgeries were refused and the true leader went
 * on.
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
import { Client, Elector, Keeper, fence } from "@leasesvc/client";

/** A write the sink accepted. */
interface Accepted {
  task: number;
  token: number;
  holder: string;
}

/**
 * FencingSink is the downstream system: it hands out the next task and
 * records results, and refuses any request whose proof the Guard refuses:
 * not signed by the service for this lease, or with a token lower than the
 * highest admitted. A claim presents the proof too, so a new leader fences
 * off the old one before it reads anything.
 */
export class FencingSink {
  readonly tasks: number;
  readonly lease: string;
  readonly guard: fence.Guard;
  highest = 0;
  readonly done = new Map<number, number>(); // task → token that completed it
  readonly accepted: Accepted[] = [];
  duplicates = 0;
  staleAccepted = 0;
  staleRejected = 0;
  /** The reasons of refused proofs that were not merely stale: forgeries. */
  readonly forged: string[] = [];
  /** The holder that presented the highest token: the leader as the sink sees it. */
  leader = "";

  constructor(tasks: number, lease: string, guard: fence.Guard) {
    this.tasks = tasks;
    this.lease = lease;
    this.guard = guard;
  }

  /** fence admits proof and returns its claims, or undefined when the Guard refuses it. */
  async #fence(proof: string): Promise<fence.Claims | undefined> {
    let c: fence.Claims;
    try {
      c = await this.guard.check(this.lease, proof);
    } catch (err) {
      if (!(err instanceof fence.FenceError)) throw err;
      if (err.reason === "stale") this.staleRejected++;
      else this.forged.push(err.reason);
      return undefined;
    }
    if (c.fencingToken > this.highest) {
      this.highest = c.fencingToken;
      this.leader = c.holder;
    }
    return c;
  }

  /** claim returns up to n tasks not yet done (none: all done), or undefined when the proof is refused. */
  async claim(proof: string, n = 1): Promise<number[] | undefined> {
    if ((await this.#fence(proof)) === undefined) return undefined;
    const out: number[] = [];
    for (let t = 0; t < this.tasks && out.length < n; t++) if (!this.done.has(t)) out.push(t);
    return out;
  }

  /** complete records the result of task, unless the proof is refused. */
  async complete(task: number, proof: string): Promise<boolean> {
    const c = await this.#fence(proof);
    if (c === undefined) return false;
    // An independent check of what "stale" means: lower than a token
    // already accepted for any write.
    const maxAccepted = this.accepted.reduce((m, a) => Math.max(m, a.token), 0);
    if (c.fencingToken < maxAccepted) this.staleAccepted++;
    if (this.done.has(task)) this.duplicates++;
    this.done.set(task, c.fencingToken);
    this.accepted.push({ task, token: c.fencingToken, holder: c.holder });
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
    const b = JSON.parse(raw || "{}") as { proof?: string; task?: number };
    const proof = String(b.proof ?? "");
    let status = 200;
    let body: unknown = {};
    if (req.url === "/claim") {
      const tasks = await this.claim(proof, 10);
      if (tasks === undefined) status = 409;
      else body = { tasks };
    } else if (req.url === "/complete") {
      if (!(await this.complete(Number(b.task), proof))) status = 409;
    } else {
      status = 404;
    }
    res.writeHead(status, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  }
}

/** forgeries are two proofs an agent could invent for token: the bare number, and a JWS under a key the service never had. */
export function forgeries(lease: string, token: number): string[] {
  const b64 = (v: unknown): string => Buffer.from(typeof v === "string" ? v : JSON.stringify(v)).toString("base64url");
  const header = { alg: "EdDSA", kid: Buffer.alloc(32, 1).toString("base64url"), typ: "leasesvc-fence+jwt" };
  const claims = { lease, fencingToken: token, holder: "forger", iat: Math.floor(Date.now() / 1000), iss: "leasesvc" };
  return [String(token), `${b64(header)}.${b64(claims)}.${Buffer.alloc(64).toString("base64url")}`];
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function post(url: string, body: unknown, signal: AbortSignal): Promise<{ status: number; body: { tasks?: number[] } }> {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal });
  return { status: res.status, body: (await res.json()) as { tasks?: number[] } };
}

/** agent campaigns for the lease and, while it leads, does tasks with its term's proof on every write. */
async function agent(): Promise<void> {
  const env = (k: string): string => process.env[k] ?? "";
  const sink = env("SINK_URL");
  const holder = env("HOLDER");
  const stop = new AbortController();
  process.on("SIGTERM", () => stop.abort());
  // The keeper decides how the lease is kept (a session by default, TTL 2 s if it falls back to plain renewals);
  // the Elector only what a term is.
  const keeper = new Keeper(new Client(env("LEASESVC_URL")), { ttlMs: 2000 });
  const elector = new Elector(keeper, env("LEASE_NAME"), {
    holder,
    callbacks: {
      onStartedLeading: async (signal, _token, term) => {
        const proof = term.lease.proof ?? "";
        while (!signal.aborted) {
          try {
            const claim = await post(sink + "/claim", { proof }, signal);
            if (claim.status !== 200) return; // fenced off: a newer leader exists
            const tasks = claim.body.tasks ?? [];
            if (tasks.length === 0) {
              await sleep(50); // all done: idle while leading
              continue;
            }
            for (const task of tasks) {
              await sleep(1); // the work
              if (signal.aborted) return; // stop acting the moment leadership ends
              const done = await post(sink + "/complete", { task, proof }, signal);
              if (done.status !== 200) return; // fenced off
            }
          } catch {
            if (signal.aborted) return;
            await sleep(10);
          }
        }
      },
    },
  });
  try {
    await elector.run(stop.signal);
  } finally {
    await keeper.close();
  }
}

/** main runs the sink and 5 agents, kills the leader twice, and checks the outcome. */
async function main(): Promise<number> {
  const url = process.env["LEASESVC_URL"];
  if (!url) {
    process.stderr.write("exactly-once: set LEASESVC_URL to a running leasesvc (go run ./cmd/leasesvc)\n");
    return 2;
  }
  const tasks = Number(process.env["TASKS"] ?? "1000");
  const lease = `example.exactly-once.${process.pid}.${Date.now()}`;
  const keys = new fence.RemoteKeys(url.replace(/\/$/, "") + "/.well-known/jwks.json");
  const sink = new FencingSink(tasks, lease, new fence.Guard(new fence.Verifier(keys, "leasesvc")));
  const served = await sink.listen();
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
  let forgedAt = -1;
  try {
    while (sink.done.size < tasks && Date.now() < deadline) {
      if (forgedAt < 0 && sink.done.size >= tasks / 2) {
        // Two writes forged with a far higher token: both refused, and
        // the true leader goes on.
        forgedAt = sink.done.size;
        for (const proof of forgeries(lease, sink.highest + 1000)) {
          const r = await fetch(served.url + "/complete", { method: "POST", body: JSON.stringify({ task: 0, proof }) });
          if (r.status === 200) throw new Error(`a forged proof was admitted: ${proof.slice(0, 40)}`);
        }
      }
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
    forgedRefused: sink.forged,
    forgedAt,
    writesAfterForgery: forgedAt < 0 ? 0 : sink.done.size - forgedAt,
  };
  process.stdout.write(JSON.stringify(summary) + "\n");
  const ok = summary.completed === tasks && summary.duplicates === 0 && summary.staleAccepted === 0 && killed.length === 2 &&
    sink.forged.length === 2 && summary.writesAfterForgery > 0;
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
