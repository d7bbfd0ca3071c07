/**
 * The lifecycle cases of the conformance agent (issue 46; PROTOCOL.md
 * "The keeper's lifecycle"): rules L1–L4 of the keeper, as the driver's
 * lifecycle_test.go checks them.
 */
import { type Client, Elector, InvalidArgumentError, Keeper } from "../index.js";
import { codeOf, emit, env, keeperOptions, stderrLog, stdin, stopSignal } from "./io.js";

/**
 * The "lifecycle_limit" case (issue 46, L1): the driver holds the agent
 * principal's only session, so the keeper (sessions asked for, window
 * 1,000 ms) is refused one at the session limit and holds by plain
 * renewals, reason session_limit; after the driver's "go" (its session
 * closed, a slot free again) a second hold on the same keeper is still
 * plain: the mode is the keeper's for its life.
 */
export async function lifecycleLimit(c: Client, name: string, holder: string, ttlMs: number): Promise<void> {
  const k = new Keeper(c, { ttlMs, windowMs: 1000, logger: stderrLog });
  try {
    const h = await k.hold(name, { holder });
    emit({ step: "held", token: h.token, mode: k.mode, reason: k.plainReason });
    emit({ step: "waiting" });
    await stdin().line();
    const h2 = await k.hold(name + "-2", { holder });
    emit({ step: "held2", token: h2.token, mode: k.mode });
  } finally {
    await k.close();
  }
  emit({ step: "done" });
}

/**
 * The "lifecycle_reopen" case (issue 46, L2): a keeper (a session of
 * window 1,000 ms) holds LEASE_NAME-h and an Elector over it leads
 * LEASE_NAME. The driver pauses the agent past the window, so the service
 * ends the session: the term stops, the -h holding ends with lease_lost,
 * and the keeper opens a new session at the Elector's next hold, which
 * leads again with token 2. A stop closes everything.
 */
export async function lifecycleReopen(c: Client, name: string, holder: string, ttlMs: number): Promise<void> {
  const stop = stopSignal();
  const k = new Keeper(c, { ttlMs, windowMs: 1000, logger: stderrLog });
  const e = new Elector(k, name, {
    holder,
    logger: stderrLog,
    callbacks: {
      onStartedLeading: (signal, token) =>
        new Promise<void>((resolve) => {
          emit({ step: "leading", token, mode: k.mode });
          const onEnd = (): void => {
            if (!stop.aborted) {
              process.stderr.write(`conformance agent: the term ended: ${String(signal.reason)}\n`);
              emit({ step: "stopped" });
            }
            resolve();
          };
          if (signal.aborted) onEnd();
          else signal.addEventListener("abort", onEnd, { once: true });
        }),
    },
  });
  const run = e.run(stop);
  try {
    const h = await k.hold(name + "-h", { holder, signal: stop });
    h.onChange((ev) => {
      if (ev.kind === "lost") emit({ step: "lost", token: h.token, error: codeOf(ev.error) });
    });
    emit({ step: "holding", token: h.token });
  } catch (err) {
    if (!stop.aborted) throw err;
  }
  try {
    await run;
  } finally {
    await k.close();
  }
}

/**
 * The "lifecycle_cancel" case (issue 46, L3): a keeper in mode
 * LEASE_KEEPER (plain: TTL LEASE_TTL_MS; session: window 1,000 ms) and an
 * Elector over it with cancelBeforeMs LEASE_CANCEL_BEFORE_MS. One that
 * does not fit the span is refused with invalid_argument (by the
 * constructor when the span is known, else by run), and the agent exits;
 * one that fits leads until stop.
 */
export async function lifecycleCancel(c: Client, name: string, holder: string, ttlMs: number): Promise<void> {
  const stop = stopSignal();
  const cancelBeforeMs = Number(env("LEASE_CANCEL_BEFORE_MS"));
  const k = new Keeper(c, keeperOptions(ttlMs));
  try {
    const e = new Elector(k, name, {
      holder,
      cancelBeforeMs,
      logger: stderrLog,
      callbacks: {
        onStartedLeading: (signal, token) =>
          new Promise<void>((resolve) => {
            emit({ step: "leading", token });
            if (signal.aborted) resolve();
            else signal.addEventListener("abort", () => resolve(), { once: true });
          }),
      },
    });
    await e.run(stop);
  } catch (err) {
    if (!(err instanceof InvalidArgumentError)) throw err;
    emit({ step: "refused", error: codeOf(err), message: err.message });
  } finally {
    await k.close();
  }
}

/**
 * The "lifecycle_renewal" case (issue 46, L4): a plain keeper (TTL
 * LEASE_TTL_MS) holds LEASE_NAME and the agent never renews it itself;
 * after 3 TTLs a get shows it still held. After the driver's "go" the
 * keeper closes (releasing it, renewing no more) and the agent waits for
 * stop.
 */
export async function lifecycleRenewal(c: Client, name: string, holder: string, ttlMs: number): Promise<void> {
  const k = new Keeper(c, keeperOptions(ttlMs));
  try {
    const h = await k.hold(name, { holder });
    emit({ step: "held", token: h.token });
    await new Promise((r) => setTimeout(r, 3 * ttlMs));
    const l = await c.get(name);
    emit({ step: "slept", held: l.held, token: l.fencingToken });
    await stdin().line();
  } finally {
    await k.close();
  }
  emit({ step: "closed" });
  await stdin().stopped();
}
