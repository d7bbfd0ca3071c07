import { performance } from "node:perf_hooks";

/**
 * Clock is the monotonic time and the timers a Keeper (and the holdings it
 * keeps) run on. The default is performance.now() with the global
 * setTimeout; tests pass a fake one to drive deadlines and renewals
 * without waiting.
 */
export interface Clock {
  /** Monotonic milliseconds (performance.now() by default). */
  now(): number;
  /** Calls fn once after ms; returns a handle for clearTimeout. */
  setTimeout(fn: () => void, ms: number): unknown;
  /** Cancels a timer of setTimeout; a handle already fired or undefined is ignored. */
  clearTimeout(handle: unknown): void;
}

/** The real clock: performance.now() and the global timers. */
export const systemClock: Clock = Object.freeze({
  now: () => performance.now(),
  setTimeout: (fn: () => void, ms: number): unknown => setTimeout(fn, Math.max(0, ms)),
  clearTimeout: (h: unknown): void => clearTimeout(h as ReturnType<typeof setTimeout> | undefined),
});

/** clockSleep resolves to true after ms on clock, or to false at once when signal is aborted first. */
export function clockSleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const onAbort = (): void => {
      clock.clearTimeout(t);
      resolve(false);
    };
    const t = clock.setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
