// Drives `leasectl mcp` with the official TypeScript MCP client
// (@modelcontextprotocol/sdk), as internal/leasemcp's TestTypeScriptClient
// runs it: node client.mjs, with LEASECTL (the binary), LEASESVC_URL,
// LEASESVC_PID (the service's pid, to freeze it) and LEASE_PREFIX (unique
// lease names) in the environment. It prints one JSON line per step and
// exits 1 on the first failed check.
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const { LEASECTL, LEASESVC_URL, LEASESVC_PID, LEASE_PREFIX } = process.env;
assert.ok(LEASECTL && LEASESVC_URL && LEASESVC_PID && LEASE_PREFIX, "LEASECTL, LEASESVC_URL, LEASESVC_PID and LEASE_PREFIX are required");

/** @param {string} step @param {object} [data] */
function log(step, data = {}) {
  process.stdout.write(JSON.stringify({ step, ...data }) + "\n");
}

/** Starts `leasectl mcp` as holder and connects an MCP client to it. */
async function session(holder, ttl) {
  const transport = new StdioClientTransport({
    command: LEASECTL,
    args: ["mcp", "--url", LEASESVC_URL, "--holder", holder, "--ttl", ttl],
    stderr: "inherit",
  });
  const client = new Client({ name: "leasemcp-tsclient", version: "1.0.0" });
  const events = { logs: [], updates: [] };
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => events.logs.push(n.params));
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => events.updates.push(n.params.uri));
  await client.connect(transport);
  return { client, events, holder };
}

/** Calls a tool; the client checks the result against the tool's output schema. */
async function call(s, name, args) {
  const res = await s.client.callTool({ name, arguments: args });
  if (res.isError) {
    const text = res.content.map((c) => c.text ?? "").join("");
    throw Object.assign(new Error(`${name}: ${text}`), { toolError: true });
  }
  return res.structuredContent;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, ms, cond) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    assert.ok(Date.now() < deadline, `${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

const name = `${LEASE_PREFIX}.ts`;
const a = await session("ts-a", "10s");
assert.equal(a.client.getServerVersion()?.name, "leasectl");
assert.match(a.client.getInstructions() ?? "", /fencingToken/);
const { tools } = await a.client.listTools();
assert.deepEqual(tools.map((t) => t.name).sort(), [
  "lease_acquire", "lease_checkpoint", "lease_claim_next", "lease_get", "lease_held", "lease_list", "lease_release",
]);
for (const t of tools) {
  assert.equal(t.inputSchema.type, "object", `${t.name} input schema`);
  assert.equal(t.outputSchema?.type, "object", `${t.name} output schema`);
}
const hints = Object.fromEntries(tools.map((t) => [t.name, t.annotations]));
for (const n of ["lease_get", "lease_list", "lease_held"]) {
  assert.equal(hints[n]?.readOnlyHint, true, `${n} readOnlyHint`);
}
for (const n of ["lease_acquire", "lease_claim_next"]) {
  assert.equal(hints[n]?.readOnlyHint, false, `${n} readOnlyHint`);
  assert.equal(hints[n]?.destructiveHint, false, `${n} destructiveHint`);
}
assert.equal(hints.lease_acquire.idempotentHint, true, "lease_acquire idempotentHint");
assert.equal(hints.lease_claim_next.idempotentHint, false, "lease_claim_next idempotentHint");
assert.equal(hints.lease_release?.destructiveHint, true, "lease_release destructiveHint");
log("initialized", { tools: tools.length });

// Arguments out of range are refused in plain words naming the argument.
await assert.rejects(call(a, "lease_acquire", { name, ttlSeconds: 0 }),
  (e) => e.toolError && e.message.includes("ttlSeconds must be a number between 1 and 3600") && !e.message.includes("validating"));
log("plain input error");

let r = await call(a, "lease_acquire", { name });
assert.equal(r.acquired, true);
assert.equal(r.fencingToken, 1);
log("acquire", { token: r.fencingToken });

const b = await session("ts-b", "10s");
r = await call(b, "lease_acquire", { name });
assert.equal(r.acquired, false);
assert.equal(r.holder, "ts-a");
log("acquire_other", { acquired: r.acquired, holder: r.holder });

r = await call(a, "lease_release", { name });
assert.equal(r.released, true);
r = await call(b, "lease_acquire", { name });
assert.equal(r.fencingToken, 2);
log("release_then_other", { token: r.fencingToken });

await b.client.close(); // stdin closed: the session releases what it holds
await waitFor("release at session end", 5000, async () => {
  const g = await call(a, "lease_get", { name });
  return g.lease.held === false && g.lease.fencingToken === 2;
});
log("session_end_releases");

// Background renewal: TTL 2 s, idle for 6.5 s (3.25 TTLs).
const c = await session("ts-idle", "2s");
await c.client.setLoggingLevel("warning");
const idle = `${LEASE_PREFIX}.idle`;
r = await call(c, "lease_acquire", { name: idle });
assert.equal(r.fencingToken, 1);
await c.client.subscribeResource({ uri: `lease://held/${idle}` });
await sleep(6500);
r = await call(c, "lease_get", { name: idle });
assert.equal(r.lease.held, true);
assert.equal(r.lease.heldByMe, true);
assert.equal(r.lease.fencingToken, 1);
log("renewed_while_idle", { token: r.lease.fencingToken });

// The service frozen: the loss is notified, and reported by the next call.
process.kill(Number(LEASESVC_PID), "SIGSTOP");
try {
  await waitFor("logging notification of the loss", 10000, () => c.events.logs.length > 0);
  const m = c.events.logs[0];
  assert.equal(m.level, "error");
  assert.equal(m.data.event, "lease_lost");
  assert.equal(m.data.name, idle);
  await waitFor("resource update of the loss", 5000, () => c.events.updates.includes(`lease://held/${idle}`));
  r = await call(c, "lease_held", {});
  assert.deepEqual(r.held, []);
  assert.equal(r.lostLeases.length, 1);
  assert.equal(r.lostLeases[0].name, idle);
  assert.equal(r.lostLeases[0].fencingToken, 1);
  assert.match(r.warning, /LOST/);
  log("frozen_loss_reported", { reason: r.lostLeases[0].reason });
} finally {
  process.kill(Number(LEASESVC_PID), "SIGCONT");
}

await c.client.close();
await a.client.close();
log("done");
