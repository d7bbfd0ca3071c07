/** Sessions (docs/contract.md §14) against the real leasesvc binary. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";
import { performance } from "node:perf_hooks";
import { Client, Elector, LeaseError, LeaseHeldError, LeaseLostError, SafeDeadlineError, UnauthenticatedError } from "@leasesvc/client";
import { packageDir, type Service, skipReason, startService, staticAuthEnv } from "./helpers/service.js";

const skip = skipReason();
let seq = 0;
const leaseName = (what: string): string => `svc.ts.session.${what}.${process.pid}.${++seq}`;

/** waitFor polls cond every few ms until it holds. */
async function waitFor(what: string, cond: () => boolean, withinMs = 10_000): Promise<void> {
  const until = performance.now() + withinMs;
  while (!cond()) {
    if (performance.now() > until) assert.fail("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("sessions against the real service", { skip: skip || undefined }, () => {
  let svc: Service;
  before(async () => {
    svc = await startService();
  });
  after(async () => {
    await svc?.stop();
  });

  test("open, acquire through the session, a REST renew is session_held, close releases", async () => {
    const c = new Client(svc.url);
    // A window a loaded machine keeps up with: this test is about the protocol, not the window.
    const s = await c.openSession({ windowMs: 5000 });
    try {
      assert.equal(s.windowMs, 5000);
      assert.equal(s.heartbeatMs, 1250);
      assert.ok(s.leaseTtlMs >= 15000, String(s.leaseTtlMs));
      assert.ok(s.deadline() > performance.now(), "the first heartbeat was acknowledged");
      const name = leaseName("ops");
      const l = await s.acquire(name, { holder: "a", metadata: { k: 1 } });
      assert.deepEqual([l.holder, l.fencingToken, l.held, l.session, l.sessionWindowMs], ["a", 1, true, true, 5000]);
      const rest = await c.renew(name, { holder: "a", fencingToken: 1 }).catch((e: unknown) => e);
      assert.ok(rest instanceof LeaseError && rest.code === "session_held" && rest.status === 409, String(rest));
      const held = await new Client(svc.url).acquire(name, { holder: "b", ttlMs: 5000 }).catch((e: unknown) => e);
      assert.ok(held instanceof LeaseHeldError, String(held));
      const r = await s.renew(name, { holder: "a", fencingToken: 1, checkpoint: { n: 1 } });
      assert.deepEqual(r.checkpoint, { n: 1 });
      await assert.rejects(s.renew(name, { holder: "a", fencingToken: 9 }), LeaseLostError);
      const d = s.deadline();
      await waitFor("the deadline to move with the heartbeats", () => s.deadline() > d);
      await s.close();
      assert.equal((await c.get(name)).held, false, "close released it");
    } finally {
      await s.close();
    }
  });

  test("static auth: the upgrade carries the token (the principal is the holding's); none is refused before the upgrade", async () => {
    const auth = await startService(staticAuthEnv());
    try {
      await assert.rejects(new Client(auth.url).openSession(), UnauthenticatedError);
      await assert.rejects(new Client(auth.url, { token: "wrong-token-0123456789" }).openSession(), UnauthenticatedError);
      const s = await new Client(auth.url, { token: async () => "agent-token-0123456789" }).openSession({ windowMs: 5000 });
      try {
        const l = await s.acquire(leaseName("auth"), { holder: "a" });
        assert.deepEqual([l.principal, l.session], ["agent@example.com", true]);
      } finally {
        await s.close();
      }
    } finally {
      await auth.stop();
    }
  });

  test("a crashed agent's lease frees within the window, not the TTL", async () => {
    const name = leaseName("crash");
    const script = `
      import { Client } from ${JSON.stringify(join(packageDir, "dist", "index.js"))};
      const s = await new Client(process.argv[1]).openSession({ windowMs: 1000 });
      const l = await s.acquire(process.argv[2], { holder: "crasher" });
      console.log(JSON.stringify({ token: l.fencingToken }));
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script, svc.url, name], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once("line", resolve);
        child.once("exit", (code) => reject(new Error(`the agent exited with ${code}`)));
      });
      assert.deepEqual(JSON.parse(line), { token: 1 });
      const c = new Client(svc.url);
      assert.equal((await c.get(name)).holder, "crasher");
      child.kill("SIGKILL");
      const killedAt = performance.now();
      const l = await c.acquire(name, { holder: "next", ttlMs: 5000, waitMs: 20_000 });
      const took = performance.now() - killedAt;
      assert.equal(l.fencingToken, 2);
      // The session lease TTL is 30 s: a takeover this fast came from the session's death.
      assert.ok(took < 10_000, `took over ${Math.round(took)} ms after the crash`);
    } finally {
      child.kill("SIGKILL");
    }
  });

  test("the Elector holds through the Client's shared session by default and says so", async () => {
    const c = new Client(svc.url);
    const name = leaseName("shared");
    const logs: string[] = [];
    const e = Elector.forClient(c, name, {
      holder: "a",
      logger: { info: (m) => logs.push(m), warn: (m) => logs.push(m) },
      callbacks: { onStartedLeading: (signal) => new Promise<void>((r) => signal.addEventListener("abort", () => r())) },
    });
    const ac = new AbortController();
    const run = e.run(ac.signal);
    try {
      await waitFor("leading", () => e.isLeader);
      assert.ok(logs.includes("leasesvc elector: holding through a session (window 1s)"), logs.join("\n"));
      const l = await c.get(name);
      assert.deepEqual([l.holder, l.session, l.sessionWindowMs], ["a", true, 1000]);
    } finally {
      ac.abort();
      await run;
    }
    assert.equal((await c.get(name)).held, false, "released on stop");
  });

  test("a frozen service ends the Elector's term at the session deadline", async () => {
    const c = new Client(svc.url, { requestTimeoutMs: 2000 });
    const session = await c.openSession({ windowMs: 3000 });
    const name = leaseName("elector");
    const logs: string[] = [];
    let endedAt = 0;
    let reason: unknown;
    const e = Elector.forClient(
      c,
      name,
      {
        holder: "a",
        logger: { info: (m) => logs.push(m), warn: (m) => logs.push(m) },
        callbacks: {
          onStartedLeading: (signal) =>
            new Promise<void>((r) =>
              signal.addEventListener("abort", () => {
                endedAt = performance.now();
                reason = signal.reason;
                r();
              }),
            ),
        },
      },
      { session },
    );
    const ac = new AbortController();
    const run = e.run(ac.signal);
    try {
      await waitFor("leading", () => e.isLeader);
      assert.ok(logs.includes("leasesvc elector: holding through a session (window 3s)"), logs.join("\n"));
      svc.freeze();
      await waitFor("the term to end", () => endedAt > 0);
      assert.ok(reason instanceof SafeDeadlineError, String(reason));
      // The last heartbeat acknowledged before the freeze set the deadline.
      const deadline = e.safeDeadline;
      assert.ok(endedAt <= deadline, `ended ${Math.round(endedAt - deadline)} ms after the session deadline`);
    } finally {
      svc.thaw();
      ac.abort();
      await run;
      await session.close();
    }
  });
});
