/**
 * The TypeScript agent of the cross-language conformance suite: run as
 * `node dist/conformance/agent.js CASE` with LEASESVC_URL, LEASESVC_TOKEN,
 * LEASE_NAME, LEASE_HOLDER and LEASE_TTL_MS in the environment (and, for
 * some cases, LEASE_KEEPER, LEASE_CANCEL_BEFORE_MS, LEASE_PROOF). It
 * writes one JSON line per step on stdout; times are milliseconds on
 * performance.now(). A line "stop" on stdin, or its end, stops what runs
 * (an Elector releases its lease) and the agent exits 0; the cases that
 * wait for the driver read a line "go" first.
 */
import { performance } from "node:perf_hooks";
import { Client, Elector, type Holding, type HoldingEvent, Keeper, type Lease, LeaseHeldError, LeaseReservedError, electorDefaults } from "../index.js";
import { fenceCase } from "./fence.js";
import { codeOf, emit, env, keeperOptions, stderrLog, stdin, stopSignal } from "./io.js";
import { lifecycleCancel, lifecycleLimit, lifecycleRenewal, lifecycleReopen } from "./lifecycle.js";

/** step runs one call and prints either its fields or the error's code. */
async function step<T>(name: string, call: () => Promise<T>, fields: (v: T) => Record<string, unknown>, onError?: (err: unknown) => Record<string, unknown>): Promise<void> {
  try {
    const v = await call();
    emit({ step: name, ...fields(v) });
  } catch (err) {
    emit({ step: name, error: codeOf(err), ...(onError ? onError(err) : {}) });
  }
}

async function basic(c: Client, name: string, a: string, ttlMs: number): Promise<void> {
  const b = a + "-b";
  await step("acquire", () => c.acquire(name, { holder: a, ttlMs }), (l) => ({ holder: l.holder, token: l.fencingToken, held: l.held }));
  await step(
    "acquire_other",
    () => c.acquire(name, { holder: b, ttlMs }),
    (l) => ({ holder: l.holder, token: l.fencingToken }),
    (err) => (err instanceof LeaseHeldError ? { holder: err.lease.holder } : {}),
  );
  await step("acquire_again", () => c.acquire(name, { holder: a, ttlMs }), (l) => ({ token: l.fencingToken }));
  await step("renew", () => c.renew(name, { holder: a, fencingToken: 1 }), (l) => ({ token: l.fencingToken }));
  await step("renew_wrong_token", () => c.renew(name, { holder: a, fencingToken: 99 }), (l) => ({ token: l.fencingToken }));
  await step("release", () => c.release(name, a, 1), (l) => ({ token: l.fencingToken, held: l.held }));
  await step("renew_after_release", () => c.renew(name, { holder: a, fencingToken: 1 }), (l) => ({ token: l.fencingToken }));
  await step("acquire_other", () => c.acquire(name, { holder: b, ttlMs }), (l) => ({ holder: l.holder, token: l.fencingToken }));
  await step("get", () => c.get(name), (l) => ({ holder: l.holder, token: l.fencingToken, held: l.held }));
  await step("get_missing", () => c.get(name + "-missing"), (l) => ({ holder: l.holder, token: l.fencingToken }));
  emit({ step: "done" });
}

/** The "delete" case of PROTOCOL.md (docs/contract.md §15). */
async function deleteCase(c: Client, name: string, a: string, ttlMs: number): Promise<void> {
  const b = a + "-b";
  await step("acquire", () => c.acquire(name, { holder: a, ttlMs }), (l) => ({ token: l.fencingToken }));
  await step(
    "delete_held",
    () => c.delete(name),
    (l) => ({ holder: l.holder, token: l.fencingToken }),
    (err) => (err instanceof LeaseHeldError ? { holder: err.lease.holder } : {}),
  );
  await step("release", () => c.release(name, a, 1), (l) => ({ held: l.held }));
  await step("delete", () => c.delete(name), (l) => ({ holder: l.holder, token: l.fencingToken, held: l.held }));
  await step("get_deleted", () => c.get(name), (l) => ({ holder: l.holder, token: l.fencingToken }));
  await step("delete_again", () => c.delete(name), (l) => ({ holder: l.holder, token: l.fencingToken }));
  await step("acquire_after", () => c.acquire(name, { holder: b, ttlMs }), (l) => ({ holder: l.holder, token: l.fencingToken }));
  emit({ step: "done" });
}

async function wait(c: Client, name: string, a: string, ttlMs: number): Promise<void> {
  emit({ step: "waiting" });
  const start = performance.now();
  await step("acquired", () => c.acquire(name, { holder: a, ttlMs, waitMs: 10_000 }), (l) => ({ token: l.fencingToken, waitedMs: Math.round(performance.now() - start) }));
  emit({ step: "done" });
}

async function ratelimit(c: Client, name: string): Promise<number> {
  const start = performance.now();
  let ok = 0;
  for (let i = 0; i < 3; i++) {
    try {
      await c.get(name);
      ok++;
    } catch (err) {
      emit({ step: "error", error: codeOf(err) });
      return 1;
    }
  }
  emit({ step: "done", ok, elapsedMs: Math.round(performance.now() - start) });
  return 0;
}

/** checkpointN is the checkpoint's "n" member, 0 without a checkpoint. */
function checkpointN(l: Lease): unknown {
  return l.checkpoint?.["n"] ?? 0;
}

async function succession(c: Client, name: string, a: string, ttlMs: number): Promise<void> {
  const b = a + "-b";
  const l = await c.acquire(name, { holder: a, ttlMs, priority: 7 });
  emit({ step: "acquire_priority", token: l.fencingToken, priority: l.priority });
  const t = await c.transfer(name, { holder: a, fencingToken: l.fencingToken, to: b, checkpoint: { n: 1 }, reserveMs: 10_000 });
  emit({ step: "transfer", held: t.held, reservedFor: t.reservedFor });
  await step(
    "acquire_reserved",
    () => c.acquire(name, { holder: a + "-c", ttlMs }),
    () => ({ error: "none" }),
    (err) => (err instanceof LeaseReservedError ? { reservedFor: err.reservedFor } : {}),
  );
  const s = await c.acquire(name, { holder: b, ttlMs });
  emit({ step: "successor", holder: s.holder, token: s.fencingToken, checkpointN: checkpointN(s), checkpointToken: s.checkpointToken });

  const y = name + "-yield";
  const h = await c.acquire(y, { holder: a, ttlMs, priority: 1 });
  emit({ step: "holding", token: h.fencingToken, priority: h.priority });
  const deadline = performance.now() + 10_000;
  let r: Lease;
  for (;;) {
    r = await c.renew(y, { holder: a, fencingToken: h.fencingToken });
    if (r.yieldRequested || performance.now() > deadline) break;
    await new Promise((res) => setTimeout(res, 50));
  }
  emit({ step: "yield_requested", yieldRequested: r.yieldRequested, yieldTo: r.yieldTo, candidates: r.candidates });
  const rel = await c.release(y, a, h.fencingToken, { checkpoint: { n: 2 } });
  emit({ step: "released", held: rel.held, checkpointN: checkpointN(rel) });
  emit({ step: "done" });
}

/**
 * session runs the session case (docs/contract.md §14): a session of window
 * 1 s whose deadline follows the acknowledged heartbeats, an acquire through
 * it (the lease says session-held, a plain renew is refused), a checkpoint
 * and a release over it, then a holding left to the driver, which kills the
 * agent and sees the lease free within the window. A stop closes the
 * session.
 */
async function sessionCase(c: Client, name: string, a: string, ttlMs: number): Promise<void> {
  const b = a + "-b";
  const s = await c.openSession({ windowMs: 1000 });
  try {
    emit({ step: "opened", windowMs: s.windowMs });
    // openSession resolves once the first heartbeat is acknowledged.
    emit({ step: "deadline", aheadMs: Math.round(s.deadline() - performance.now()) });
    const l = await s.acquire(name, { holder: a });
    emit({ step: "acquire", holder: l.holder, token: l.fencingToken, held: l.held, session: l.session, sessionWindowMs: l.sessionWindowMs });
    await step("renew_plain", () => c.renew(name, { holder: a, fencingToken: l.fencingToken }), () => ({ error: "none" }));
    await step(
      "acquire_other",
      () => c.acquire(name, { holder: b, ttlMs }),
      () => ({ error: "none" }),
      (err) => (err instanceof LeaseHeldError ? { holder: err.lease.holder } : {}),
    );
    const r = await s.renew(name, { holder: a, fencingToken: l.fencingToken, checkpoint: { n: 1 } });
    emit({ step: "checkpoint", token: r.fencingToken, checkpointN: checkpointN(r) });
    const rl = await s.release(name, a, l.fencingToken, { checkpoint: { n: 2 } });
    emit({ step: "release", held: rl.held, checkpointN: checkpointN(rl) });
    const h = await s.acquire(name, { holder: a });
    emit({ step: "holding", token: h.fencingToken });
    // The driver kills the agent here; a stop closes the session.
    await stdin().stopped();
  } finally {
    await s.close();
  }
}

/**
 * elector runs an Elector on plain renewals until stdin says stop; freeze
 * reports deadlines, revoke reports reasons. Both check the renewals' safe
 * deadline, so they opt out of sessions, as the Go agent does.
 */
async function elector(c: Client, name: string, a: string, ttlMs: number, kind: "freeze" | "revoke"): Promise<void> {
  const stop = stopSignal();
  const k = new Keeper(c, { plainRenewals: true, ttlMs, logger: stderrLog });
  const e: Elector = new Elector(k, name, {
    holder: a,
    logger: stderrLog,
    callbacks: {
      onStartedLeading: (signal, token) =>
        new Promise<void>((resolve) => {
          emit({ step: "leading", token });
          const onEnd = (): void => {
            const now = performance.now();
            if (kind === "freeze") {
              const x = now - e.lastSentAt;
              emit({ step: "stopped", sinceLastSentMs: Math.round(x * 1000) / 1000, ttlMs, driftMargin: electorDefaults.driftMargin });
            } else {
              emit({ step: "stopped", reason: signal.reason === stop.reason ? "stop" : codeOf(signal.reason) });
            }
            resolve();
          };
          if (signal.aborted) onEnd();
          else signal.addEventListener("abort", onEnd, { once: true });
        }),
      onRenewed: (info) => {
        if (kind === "freeze") emit({ step: "renewed", sentMs: Math.round(info.sentAt * 1000) / 1000 });
      },
    },
  });
  try {
    await e.run(stop);
  } finally {
    await k.close();
  }
}

/** nextEvent resolves to h's first event that want accepts; rejects when stop aborts first. */
function nextEvent(h: Holding, stop: AbortSignal, want: (ev: HoldingEvent) => boolean): Promise<HoldingEvent> {
  return new Promise((resolve, reject) => {
    const onStop = (): void => {
      off();
      reject(stop.reason);
    };
    const off = h.onChange((ev) => {
      if (!want(ev)) return;
      off();
      stop.removeEventListener("abort", onStop);
      resolve(ev);
    });
    if (stop.aborted) onStop();
    else stop.addEventListener("abort", onStop, { once: true });
  });
}

/**
 * The "keeper" case of PROTOCOL.md (issue 38): a Keeper in mode
 * LEASE_KEEPER (plain: TTL LEASE_TTL_MS; session: window 1,000 ms) holds
 * LEASE_NAME, reports its deadline moving by itself, writes a checkpoint,
 * reports the loss after the driver's revoke, holds again and releases
 * with a checkpoint. A stop (or stdin's end) closes the keeper.
 */
async function keeperCase(c: Client, name: string, holder: string, ttlMs: number, stop: AbortSignal): Promise<void> {
  const k = new Keeper(c, keeperOptions(ttlMs));
  emit({ step: "keeper", mode: env("LEASE_KEEPER", "session") });
  const ahead = (h: Holding): number => Math.round((h.deadline - k.clock.now()) * 10) / 10;
  try {
    const h = await k.hold(name, { holder, signal: stop });
    // Listen before anything else can move the deadline.
    const from = h.deadline;
    const moved = nextEvent(h, stop, (ev) => ev.kind === "moved" && ev.deadline > from);
    const lost = nextEvent(h, stop, (ev) => ev.kind === "lost");
    lost.catch(() => undefined); // awaited later; a stop before then is not an unhandled rejection
    emit({ step: "held", token: h.token, mode: k.mode, aheadMs: ahead(h) });
    await moved;
    emit({ step: "moved", token: h.token, aheadMs: ahead(h) });
    await step("checkpoint", () => h.renew({ n: 1 }), (l) => ({ token: l.fencingToken, checkpointN: checkpointN(l) }));
    const ev = await lost;
    emit({ step: "lost", token: h.token, error: ev.kind === "lost" ? codeOf(ev.error) : ev.kind });
    const h2 = await k.hold(name, { holder, signal: stop });
    emit({ step: "held", token: h2.token, mode: k.mode, aheadMs: ahead(h2) });
    await step("released", () => h2.release({ n: 2 }), (l) => ({ held: l?.held ?? false, checkpointN: l === undefined ? 0 : checkpointN(l) }));
    emit({ step: "done" });
  } catch (err) {
    if (!stop.aborted) throw err;
  } finally {
    await k.close();
  }
}

async function main(): Promise<number> {
  const kase = process.argv[2] ?? "";
  const token = process.env["LEASESVC_TOKEN"] ?? "";
  const c = new Client(env("LEASESVC_URL"), token === "" ? {} : { token });
  const name = env("LEASE_NAME");
  const holder = env("LEASE_HOLDER");
  const ttlMs = Number(env("LEASE_TTL_MS", "3000"));
  switch (kase) {
    case "basic":
      await basic(c, name, holder, ttlMs);
      return 0;
    case "wait":
      await wait(c, name, holder, ttlMs);
      return 0;
    case "delete":
      await deleteCase(c, name, holder, ttlMs);
      return 0;
    case "ratelimit":
      return ratelimit(c, name);
    case "succession":
      await succession(c, name, holder, ttlMs);
      return 0;
    case "freeze":
    case "revoke":
      await elector(c, name, holder, ttlMs, kase);
      return 0;
    case "session":
      await sessionCase(c, name, holder, ttlMs);
      return 0;
    case "keeper":
      await keeperCase(c, name, holder, ttlMs, stopSignal());
      return 0;
    case "fence":
      await fenceCase(c, env("LEASESVC_URL"), name, holder, ttlMs, env("LEASE_PROOF"), emit);
      return 0;
    case "lifecycle_limit":
      await lifecycleLimit(c, name, holder, ttlMs);
      return 0;
    case "lifecycle_reopen":
      await lifecycleReopen(c, name, holder, ttlMs);
      return 0;
    case "lifecycle_cancel":
      await lifecycleCancel(c, name, holder, ttlMs);
      return 0;
    case "lifecycle_renewal":
      await lifecycleRenewal(c, name, holder, ttlMs);
      return 0;
  }
  process.stderr.write(
    `conformance agent: unknown case ${JSON.stringify(kase)} (want basic, wait, ratelimit, freeze, revoke, succession, delete, session, fence, keeper, ` +
      `lifecycle_limit, lifecycle_reopen, lifecycle_cancel or lifecycle_renewal)\n`,
  );
  return 2;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`conformance agent: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
