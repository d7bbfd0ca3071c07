/**
 * A manual Clock for Keeper and Elector tests: now() moves only when
 * advance() moves it, and advance fires the timers that fall due, in order.
 */
import { performance } from "node:perf_hooks";
import type { Clock } from "../../src/clock.js";

export class FakeClock implements Clock {
  t: number;
  readonly #timers = new Map<number, { at: number; fn: () => void }>();
  #id = 0;

  /** Starts at start (default performance.now(), so a session's deadline, on performance.now(), lies ahead of it). */
  constructor(start = performance.now()) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.#id;
    this.#timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return id;
  }

  clearTimeout(h: unknown): void {
    if (typeof h === "number") this.#timers.delete(h);
  }

  /** The number of timers armed. */
  get armed(): number {
    return this.#timers.size;
  }

  /** Moves now by ms, firing each timer due on the way at its time. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.#timers) if (e[1].at <= end && (next === undefined || e[1].at < next[1].at)) next = e;
      if (next === undefined) break;
      this.#timers.delete(next[0]);
      this.t = Math.max(this.t, next[1].at);
      next[1].fn();
    }
    this.t = end;
  }
}
