/** Runs the conformance agent as the cross-language driver does, and reads its JSON lines. */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { packageDir } from "./service.js";

/** The agent's compiled entry point, as the driver runs it. */
export const agentPath = join(packageDir, "dist", "conformance", "agent.js");

export class Agent {
  readonly proc: ChildProcess;
  readonly lines: Array<Record<string, unknown>> = [];
  stderr = "";
  #waiters: Array<() => void> = [];
  #read = 0;
  readonly exited: Promise<number | null>;

  constructor(kase: string, env: Record<string, string>) {
    this.proc = spawn(process.execPath, [agentPath, kase], { env: { ...process.env, ...env }, stdio: ["pipe", "pipe", "pipe"] });
    createInterface({ input: this.proc.stdout! }).on("line", (line) => {
      this.lines.push(JSON.parse(line) as Record<string, unknown>);
      for (const w of this.#waiters.splice(0)) w();
    });
    this.proc.stderr!.on("data", (b: Buffer) => (this.stderr += b.toString()));
    this.exited = new Promise((r) => this.proc.once("exit", (code) => r(code)));
  }

  /** next returns the next line, waiting up to withinMs for it. */
  async next(withinMs = 15_000): Promise<Record<string, unknown>> {
    const until = Date.now() + withinMs;
    while (this.#read >= this.lines.length) {
      if (Date.now() > until) throw new Error(`no line from the agent within ${withinMs} ms; stderr:\n${this.stderr}`);
      await new Promise<void>((r) => {
        this.#waiters.push(r);
        setTimeout(r, 50);
      });
    }
    return this.lines[this.#read++]!;
  }

  /** write sends one line to the agent's stdin. */
  write(line: string): void {
    this.proc.stdin!.write(line + "\n");
  }

  kill(): void {
    if (this.proc.exitCode === null) this.proc.kill("SIGKILL");
  }
}
