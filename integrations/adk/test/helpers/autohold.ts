/** A Fencing that holds every lease it is asked about, for stores used outside runs (the validation suites). */
import type { Fencing, Run, Runs } from "../../src/index.js";

/** AutoHold begins a run of each lease on first use and keeps it until close. */
export class AutoHold implements Fencing {
  readonly runs: Runs;
  readonly #held = new Map<string, Promise<Run>>();

  constructor(runs: Runs) {
    this.runs = runs;
  }

  async proof(lease: string): Promise<string> {
    let r = this.#held.get(lease);
    if (r === undefined) {
      r = this.runs.begin(lease, { strategy: "enqueue" });
      this.#held.set(lease, r);
    }
    return (await r).fenceProof();
  }

  check(lease: string, token: number): void {
    this.runs.check(lease, token);
  }

  /** Ends every run it began. */
  async close(): Promise<void> {
    const runs = await Promise.allSettled(this.#held.values());
    this.#held.clear();
    await Promise.all(runs.map((r) => (r.status === "fulfilled" ? r.value.end() : undefined)));
  }
}
