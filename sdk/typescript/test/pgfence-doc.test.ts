/**
 * docs/fencing.md's TypeScript walkthrough, taken from the page as it is:
 * type-checked with the package's compiler settings and run against the
 * real leasesvc binary and PostgreSQL (LEASESVC_PG_URL). It must print each
 * step, the deposed holder's late write refused as stale, and leave the
 * rows it says it wrote.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";
import pg from "pg";
import ts from "typescript";
import { packageDir, repoRoot, skipReason, startService } from "./helpers/service.js";

const url = process.env["LEASESVC_PG_URL"] ?? "";
const skip = url === "" ? "LEASESVC_PG_URL is not set: go test ./sdk/typescript runs this test with a throwaway PostgreSQL" : repoRoot() === "" ? "the repository is not above the package" : skipReason();
if (skip && process.env["CI"] === "true") throw new Error(skip);

/** The walkthrough's section of docs/fencing.md, and its blocks by heading. */
const walkthroughHeading = "## A walkthrough: PostgreSQL from Go, Python and TypeScript";

/** block returns the first fenced code block of info string lang under "### heading" in the walkthrough. */
function block(page: string, heading: string, lang: string): string {
  const start = page.indexOf(`\n${walkthroughHeading}\n`);
  assert.ok(start >= 0, `docs/fencing.md has no "${walkthroughHeading}" section`);
  let section = page.slice(start + 1);
  const next = section.indexOf("\n## ");
  if (next >= 0) section = section.slice(0, next);
  const sub = section.indexOf(`\n### ${heading}\n`);
  assert.ok(sub >= 0, `the walkthrough has no "### ${heading}"`);
  const open = section.indexOf("\n```" + lang + "\n", sub);
  assert.ok(open >= 0, `"### ${heading}" has no \`\`\`${lang} block`);
  const body = section.slice(open + 5 + lang.length);
  return body.slice(0, body.indexOf("\n```") + 1);
}

test("docs/fencing.md's TypeScript walkthrough type-checks and runs: the deposed holder's late write is refused after the successor fenced first", { skip: skip || undefined }, async () => {
  const source = block(readFileSync(join(repoRoot(), "docs", "fencing.md"), "utf8"), "TypeScript", "ts");
  const dir = join(packageDir, "build", "doc");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "walkthrough.ts");
  writeFileSync(file, source);
  const program = ts.createProgram([file], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ["lib.es2022.d.ts"],
    types: ["node"],
    strict: true,
    noUncheckedIndexedAccess: true,
    noUnusedLocals: true,
    skipLibCheck: true,
    outDir: dir,
    rootDir: dir,
  });
  const diagnostics = ts.getPreEmitDiagnostics(program).concat(program.emit().diagnostics);
  assert.deepEqual(
    diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")),
    [],
    "the walkthrough does not type-check",
  );

  // A fresh start: the service below numbers the lease's tokens from 1.
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    await db.query("DROP TABLE IF EXISTS orders");
    await db.query("DELETE FROM leasesvc_fence WHERE resource = 'orders_table'").catch((e: { code?: string }) => {
      if (e.code !== "42P01") throw e; // undefined_table: the walkthrough creates it
    });
    const svc = await startService();
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [join(dir, "walkthrough.js")], {
        env: { ...process.env, LEASESVC_URL: svc.url, DATABASE_URL: url },
        timeout: 60_000,
      });
      assert.deepEqual(stdout.trim().split("\n"), [
        "agent-1 wrote order-1 with token 1",
        "agent-2 fenced orders_table with token 2",
        "agent-1's late write refused: stale",
        "agent-2 wrote order-2 with token 2",
      ]);
    } finally {
      await svc.stop();
    }
    const fenced = await db.query("SELECT lease, fencing_token::int AS token FROM leasesvc_fence WHERE resource = 'orders_table'");
    assert.deepEqual(fenced.rows, [{ lease: "team-a.scheduler", token: 2 }]);
    const orders = await db.query("SELECT item, fencing_token::int AS token FROM orders ORDER BY item");
    assert.deepEqual(orders.rows, [
      { item: "order-1", token: 1 },
      { item: "order-2", token: 2 },
    ]);
  } finally {
    await db.end();
  }
});
