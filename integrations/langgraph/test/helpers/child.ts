/** A replica in a child process, driven by JSON lines (the freeze and kill tests). */
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";

/** A child replica: its lines, and a way to wait for one. */
export class Child {
  readonly proc: ChildProcess;
  readonly lines: Array<Record<string, unknown>> = [];
  stderr = "";
  #waiters: Array<() => void> = [];

  constructor(script: string, config: Record<string, unknown>) {
    this.proc = spawn(process.execPath, [script], { env: { ...process.env, REPLICA: JSON.stringify(config) }, stdio: ["pipe", "pipe", "pipe"] });
    createInterface({ input: this.proc.stdout! }).on("line", (line) => {
      try {
        this.lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        this.stderr += line + "\n";
      }
      for (const w of this.#waiters.splice(0)) w();
    });
    this.proc.stderr!.on("data", (b: Buffer) => (this.stderr += b.toString()));
  }

  /** The first line with key (and value, if given), waiting up to ms for it. */
  async line(key: string, value?: unknown, ms = 30_000): Promise<Record<string, unknown>> {
    const until = Date.now() + ms;
    for (;;) {
      const l = this.lines.find((x) => key in x && (value === undefined || x[key] === value));
      if (l !== undefined) return l;
      if (Date.now() > until) throw new Error(`no line with ${key}${value === undefined ? "" : "=" + JSON.stringify(value)} within ${ms} ms; lines ${JSON.stringify(this.lines)}; stderr:\n${this.stderr}`);
      await new Promise<void>((r) => {
        this.#waiters.push(r);
        setTimeout(r, 100);
      });
    }
  }

  send(line: string): void {
    this.proc.stdin!.write(line + "\n");
  }

  freeze(): void {
    this.proc.kill("SIGSTOP");
  }

  thaw(): void {
    this.proc.kill("SIGCONT");
  }

  /** Kills the child (thawed first) and waits for its end. */
  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((r) => this.proc.once("exit", r));
    this.proc.kill("SIGCONT");
    this.proc.kill("SIGKILL");
    await exited;
  }

  /** Resolves at the child's exit. */
  exited(): Promise<number | null> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return Promise.resolve(this.proc.exitCode);
    return new Promise((r) => this.proc.once("exit", (code) => r(code)));
  }
}

/**
 * pausingAt wraps a Firestore client so that its nth runTransaction
 * (1-based) first prints {"paused": n} and waits for a line on stdin: the
 * parent freezes the process there, between the run's own check of its
 * holding and the transaction that is the fence. That transaction's outcome
 * is printed ({"tx": "committed"} or {"tx": "refused", "error", "reason"})
 * and is what settled resolves to once it is known.
 */
export function pausingAt<T extends { runTransaction: (...a: never[]) => unknown }>(db: T, nth: number, out: (o: Record<string, unknown>) => void): { db: T; settled: () => Promise<void> } {
  let n = 0;
  let paused: Promise<void> = Promise.resolve();
  const lines = createInterface({ input: process.stdin });
  const waiting: Array<() => void> = [];
  lines.on("line", () => waiting.shift()?.());
  const proxy = new Proxy(db, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (prop !== "runTransaction" || typeof v !== "function") return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      return async (...args: unknown[]) => {
        n++;
        if (n !== nth) return (v as (...a: unknown[]) => unknown).apply(target, args);
        out({ paused: n });
        await new Promise<void>((r) => waiting.push(r));
        const p = Promise.resolve((v as (...a: unknown[]) => unknown).apply(target, args));
        paused = p.then(
          () => out({ tx: "committed" }),
          (e: { name?: string; reason?: string; message?: string }) => out({ tx: "refused", error: e?.name ?? "Error", reason: e?.reason ?? "", message: e?.message ?? String(e) }),
        );
        return p;
      };
    },
  });
  return { db: proxy, settled: () => paused };
}
