/**
 * A capped exponential backoff with jitter: retry n (n = 0, 1, …) waits a
 * random time in [d/2, d], d = min(maxMs, initialMs × multiplier^n), so
 * that the retries of many clients spread out instead of arriving together.
 */
export interface Backoff {
  /** The base delay before the first retry, in ms. Default 100. */
  initialMs: number;
  /** The cap of a delay, in ms. Default 2000. */
  maxMs: number;
  /** How much the delay grows after each retry, ≥ 1. Default 2. */
  multiplier: number;
}

/** The Backoff the Client uses by default: 100 ms … 2 s, doubling. */
export const defaultBackoff: Readonly<Backoff> = Object.freeze({ initialMs: 100, maxMs: 2000, multiplier: 2 });

/** withDefaults fills the missing fields of b and checks them; field names b in errors. */
export function backoffWithDefaults(b: Partial<Backoff> | undefined, field: string, base: Backoff = defaultBackoff): Backoff {
  const initialMs = b?.initialMs ?? base.initialMs;
  const out: Backoff = {
    initialMs,
    maxMs: b?.maxMs ?? Math.max(base.maxMs, initialMs),
    multiplier: b?.multiplier ?? base.multiplier,
  };
  if (!(out.initialMs > 0)) throw new RangeError(`${field}.initialMs ${out.initialMs} must be positive`);
  if (!(out.maxMs >= out.initialMs)) throw new RangeError(`${field}.maxMs ${out.maxMs} must be at least initialMs ${out.initialMs}`);
  if (!(out.multiplier >= 1)) throw new RangeError(`${field}.multiplier ${out.multiplier} must be at least 1`);
  return out;
}

/** backoffDelay returns the jittered delay in ms before retry n (n = 0 for the first retry). */
export function backoffDelay(b: Backoff, n: number): number {
  let d = b.initialMs;
  for (let i = 0; i < n && d < b.maxMs; i++) d *= b.multiplier;
  d = Math.min(d, b.maxMs);
  return d / 2 + (Math.random() * d) / 2;
}

/** sleep resolves after ms, or to false at once when signal is aborted first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(false);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
