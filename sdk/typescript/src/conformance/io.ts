/**
 * What the conformance agent's cases share: the step lines on stdout, the
 * driver's lines on stdin, the environment, the logger on stderr.
 */
import { createInterface } from "node:readline";
import { type KeeperOptions, LeaseError, SafeDeadlineError } from "../index.js";

/** emit writes one step line at once. */
export function emit(line: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(line) + "\n");
}

/** codeOf is the API's code string of an error the SDK threw (an InvalidArgumentError: "invalid_argument"). */
export function codeOf(err: unknown): string {
  if (err instanceof LeaseError) return err.code;
  if (err instanceof SafeDeadlineError) return err.code;
  return "unexpected: " + String(err);
}

/** env is the environment variable name, or def when it is unset or empty; without def, an unset one throws. */
export function env(name: string, def?: string): string {
  const v = process.env[name];
  if (v !== undefined && v !== "") return v;
  if (def !== undefined) return def;
  throw new Error(`conformance agent: ${name} is not set`);
}

/**
 * Stdin reads the driver's lines: stop is aborted at a line "stop" or at
 * the end of stdin; line() resolves to each other line in turn (undefined
 * once stdin ended). One per process: every case reads through it.
 */
class Stdin {
  readonly #ac = new AbortController();
  readonly #lines: string[] = [];
  readonly #waiters: Array<(line: string | undefined) => void> = [];
  #ended = false;

  constructor() {
    const rl = createInterface({ input: process.stdin });
    rl.on("line", (raw) => {
      const line = raw.trim();
      if (line === "stop") {
        this.#ac.abort(new Error("stop"));
        return;
      }
      const w = this.#waiters.shift();
      if (w !== undefined) w(line);
      else this.#lines.push(line);
    });
    rl.on("close", () => {
      this.#ended = true;
      this.#ac.abort(new Error("stdin closed"));
      for (const w of this.#waiters.splice(0)) w(undefined);
    });
  }

  /** Aborted at "stop" or the end of stdin. */
  get stop(): AbortSignal {
    return this.#ac.signal;
  }

  /** The next line other than "stop"; undefined once stdin ended. */
  line(): Promise<string | undefined> {
    const l = this.#lines.shift();
    if (l !== undefined) return Promise.resolve(l);
    if (this.#ended) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** Resolves once stop is aborted. */
  stopped(): Promise<void> {
    const s = this.stop;
    return new Promise((resolve) => {
      if (s.aborted) resolve();
      else s.addEventListener("abort", () => resolve(), { once: true });
    });
  }
}

let stdinReader: Stdin | undefined;

/** stdin is the process's one Stdin. */
export function stdin(): Stdin {
  return (stdinReader ??= new Stdin());
}

/** stopSignal is aborted when stdin says "stop" or ends. */
export function stopSignal(): AbortSignal {
  return stdin().stop;
}

/** stderrLog is the logger of the agent's keepers and Electors: one line per entry on stderr. */
export const stderrLog = {
  info: (m: string, f?: Record<string, unknown>): void => void process.stderr.write(`${m} ${JSON.stringify(f ?? {})}\n`),
  warn: (m: string, f?: Record<string, unknown>): void => void process.stderr.write(`${m} ${JSON.stringify(f ?? {})}\n`),
};

/**
 * keeperOptions are the options of a keeper in mode LEASE_KEEPER (default
 * "session"): plain renewals with TTL ttlMs, or a session of window
 * 1,000 ms of its own.
 */
export function keeperOptions(ttlMs: number): KeeperOptions {
  const mode = env("LEASE_KEEPER", "session");
  if (mode !== "plain" && mode !== "session") throw new Error(`conformance agent: LEASE_KEEPER ${JSON.stringify(mode)} must be plain or session`);
  return { plainRenewals: mode === "plain", ttlMs, windowMs: 1000, logger: stderrLog };
}
