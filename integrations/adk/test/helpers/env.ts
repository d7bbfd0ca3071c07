/**
 * The world of the tests: the real leasesvc binary (LEASESVC_BIN, or built
 * from the repository above the package with go build), and the Firestore
 * emulator that FIRESTORE_EMULATOR_HOST names (the Go test starts one).
 * Without either, tests skip, and fail under CI=true.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Firestore } from "@google-cloud/firestore";
import { fence } from "@leasesvc/client";

/** The package's directory (this file runs from build/test/helpers). */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The directory of the leasesvc go.mod above the package, or "". */
function repoRoot(): string {
  if (process.env["LEASESVC_REPO"]) return process.env["LEASESVC_REPO"];
  for (let dir = packageDir; ; ) {
    const mod = join(dir, "go.mod");
    if (existsSync(mod) && readFileSync(mod, "utf8").includes("module github.com/leasesvc/leasesvc")) return dir;
    const up = dirname(dir);
    if (up === dir) return "";
    dir = up;
  }
}

let built: string | undefined;

/** The leasesvc binary's path, built once if needed; "" when it cannot be had (throws under CI=true). */
export function serviceBinary(): string {
  if (built !== undefined) return built;
  if (process.env["LEASESVC_BIN"]) return (built = process.env["LEASESVC_BIN"]);
  const root = repoRoot();
  try {
    if (root === "") throw new Error("the leasesvc repository (go.mod) is not above " + packageDir);
    const out = join(mkdtempSync(join(tmpdir(), "leasesvc-int-")), "leasesvc");
    execFileSync("go", ["build", "-o", out, "./cmd/leasesvc"], { cwd: root, stdio: ["ignore", "ignore", "inherit"] });
    return (built = out);
  } catch (err) {
    if (process.env["CI"] === "true") throw new Error(`the leasesvc binary: ${String(err)}; install Go 1.26 or set LEASESVC_BIN`);
    return (built = "");
  }
}

/** Why the tests cannot run here, or "" (throws under CI=true instead of skipping). */
export function skipReason(): string {
  const why: string[] = [];
  if (serviceBinary() === "") why.push("no leasesvc binary (install Go 1.26 or set LEASESVC_BIN)");
  if (!process.env["FIRESTORE_EMULATOR_HOST"]) why.push("no Firestore emulator (set FIRESTORE_EMULATOR_HOST; go test ./integrations/... starts one)");
  if (why.length > 0 && process.env["CI"] === "true") throw new Error(why.join("; ") + " (CI=true: these tests must run)");
  return why.join("; ");
}

/** A running leasesvc. */
export interface Service {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** Starts the binary on a free port (memory backend) and resolves once it listens. */
export async function startService(env: Record<string, string> = {}): Promise<Service> {
  const proc = spawn(serviceBinary(), [], { env: { ...process.env, PORT: "0", ...env }, stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error("leasesvc did not log its address within 20 s")), 20_000);
    proc.once("exit", (code) => fail(new Error(`leasesvc exited with ${code} before listening`)));
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      try {
        const o = JSON.parse(line) as { message?: string; addr?: string };
        if (o.message === "leasesvc listening" && o.addr) {
          clearTimeout(timer);
          ok(`http://127.0.0.1:${o.addr.slice(o.addr.lastIndexOf(":") + 1)}`);
        }
      } catch {
        // not a log line
      }
    });
  });
  return {
    url,
    proc,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGKILL");
      await exited;
    },
  };
}

/**
 * The session window of the tests' keepers, ms: 2 s rather than the
 * default 1 s, so that a test machine loaded by CI (emulators, compilers)
 * does not starve an event loop past it.
 */
export const windowMs = 2_000;

/** A Firestore client of the emulator's test project. */
export function newDb(): Firestore {
  return new Firestore({ projectId: "leasesvc-test" });
}

/** A collection prefix no other test uses. */
export function scratch(name: string): string {
  return `${name}-${randomBytes(4).toString("hex")}`;
}

/** The Verifier of the service at url: its JWKS and the default issuer. */
export function verifierOf(url: string): fence.Verifier {
  return new fence.Verifier(new fence.RemoteKeys(`${url}/.well-known/jwks.json`), "leasesvc");
}

/** Resolves after ms. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A promise with its resolve, for gates. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** waitFor polls cond every 20 ms until it holds, or throws after ms. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}
