/**
 * The real leasesvc binary for tests: built once per test process with
 * `go build ./cmd/leasesvc` from the repository root found relative to this
 * package (or taken from LEASESVC_BIN), started on a free port.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** packageDir is sdk/typescript (this file runs from build/test/helpers). */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** repoRoot is the directory of the leasesvc go.mod above the package, or "" when there is none. */
export function repoRoot(): string {
  // The Go test runs a copy of the package outside the repository.
  if (process.env["LEASESVC_REPO"]) return process.env["LEASESVC_REPO"];
  let dir = packageDir;
  for (;;) {
    const mod = join(dir, "go.mod");
    if (existsSync(mod) && readFileSync(mod, "utf8").includes("module github.com/leasesvc/leasesvc")) return dir;
    const up = dirname(dir);
    if (up === dir) return "";
    dir = up;
  }
}

let built: string | undefined;

/**
 * serviceBinary returns the path of the leasesvc binary, building it if
 * needed. Without go (and without LEASESVC_BIN) it throws under CI=true and
 * returns "" elsewhere, so the caller can skip with the message.
 */
export function serviceBinary(): string {
  if (built !== undefined) return built;
  const fromEnv = process.env["LEASESVC_BIN"];
  if (fromEnv) return (built = fromEnv);
  const root = repoRoot();
  let hasGo = true;
  try {
    execFileSync("go", ["version"], { stdio: "ignore" });
  } catch {
    hasGo = false;
  }
  if (!hasGo || root === "") {
    const why = root === "" ? "the leasesvc repository (go.mod) was not found above " + packageDir : "go is not installed";
    if (process.env["CI"] === "true") throw new Error(`${why}: install Go 1.26 (https://go.dev/dl/) or set LEASESVC_BIN to a leasesvc binary`);
    return (built = "");
  }
  const out = join(mkdtempSync(join(tmpdir(), "leasesvc-ts-")), "leasesvc");
  execFileSync("go", ["build", "-o", out, "./cmd/leasesvc"], { cwd: root, stdio: ["ignore", "ignore", "inherit"] });
  return (built = out);
}

/** skipReason is why tests against the real binary cannot run here, or "" when they can. */
export function skipReason(): string {
  return serviceBinary() === "" ? "go is not installed (or the repository is not above the package): install Go 1.26 or set LEASESVC_BIN" : "";
}

/** A running leasesvc. */
export interface Service {
  url: string;
  proc: ChildProcess;
  /** Freezes the service (SIGSTOP). */
  freeze(): void;
  /** Thaws it (SIGCONT). */
  thaw(): void;
  stop(): Promise<void>;
}

/** Tokens and policy of a service with static auth: "admin-token-0123456789" (admin) and "agent-token-0123456789" (acquire). */
export function staticAuthEnv(): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), "leasesvc-ts-auth-"));
  writeFileSync(
    join(dir, "tokens.yaml"),
    "tokens:\n  - {principal: admin@example.com, token: admin-token-0123456789}\n  - {principal: agent@example.com, token: agent-token-0123456789}\n",
  );
  writeFileSync(
    join(dir, "policy.yaml"),
    'grants:\n  - {principals: [admin@example.com], verbs: [admin], prefixes: ["*"]}\n  - {principals: [agent@example.com], verbs: [acquire], prefixes: ["*"]}\n',
  );
  return { LEASESVC_AUTH: "static", LEASESVC_AUTH_TOKENS: join(dir, "tokens.yaml"), LEASESVC_POLICY: join(dir, "policy.yaml") };
}

/** startService starts the binary on a free port with extra environment and resolves once it listens. */
export async function startService(env: Record<string, string> = {}): Promise<Service> {
  const bin = serviceBinary();
  const proc = spawn(bin, [], {
    env: { ...process.env, PORT: "0", ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise<string>((resolveUrl, reject) => {
    const rl = createInterface({ input: proc.stdout! });
    const timer = setTimeout(() => reject(new Error("leasesvc did not log its address within 20 s")), 20_000);
    proc.once("exit", (code) => reject(new Error(`leasesvc exited with ${code} before listening`)));
    rl.on("line", (line) => {
      try {
        const o = JSON.parse(line) as { message?: string; addr?: string };
        if (o.message === "leasesvc listening" && o.addr) {
          clearTimeout(timer);
          const port = o.addr.slice(o.addr.lastIndexOf(":") + 1);
          resolveUrl(`http://127.0.0.1:${port}`);
        }
      } catch {
        // not a log line
      }
    });
  });
  return {
    url,
    proc,
    freeze: () => proc.kill("SIGSTOP"),
    thaw: () => proc.kill("SIGCONT"),
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGCONT");
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGKILL");
      await exited;
    },
  };
}
