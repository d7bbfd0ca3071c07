/** The errors of runs and fenced writes. */
import type { fence } from "@leasesvc/client";

/**
 * Why a run could not start on a busy thread:
 * - "held": another holder runs it (reject);
 * - "reserved": it is reserved for another holder that is about to run it (reject);
 * - "queue_full": maxQueued runs of this process already wait for it (enqueue, interrupt);
 * - "timeout": the wait ran out before the thread was free (enqueue, interrupt).
 */
export type BusyReason = "held" | "reserved" | "queue_full" | "timeout";

/** A run found its thread busy. holder names who runs it (or will), as far as known. */
export class ThreadBusyError extends Error {
  override readonly name = "ThreadBusyError";
  /** The lease that stands for the thread. */
  readonly lease: string;
  /** Why. */
  readonly reason: BusyReason;
  /** The holder that runs the thread (or it is reserved for); "" when unknown. */
  readonly holder: string;
  /** That holding's fencing token; 0 when unknown. */
  readonly fencingToken: number;
  constructor(lease: string, reason: BusyReason, holder: string, fencingToken: number, detail: string, options?: { cause?: unknown }) {
    super(`leasesvc: thread ${JSON.stringify(lease)} is busy (${reason}): ${detail}`, options);
    this.lease = lease;
    this.reason = reason;
    this.holder = holder;
    this.fencingToken = fencingToken;
  }
}

/** Why a run was stopped: "interrupted" (a run with strategy interrupt asked for the thread), "lost" (the holding was lost or its deadline passed). */
export type StopReason = "interrupted" | "lost";

/** A run was stopped before it finished: its signal aborted with this. */
export class RunStoppedError extends Error {
  override readonly name = "RunStoppedError";
  /** The lease that stands for the thread. */
  readonly lease: string;
  /** Why. */
  readonly reason: StopReason;
  /** For "interrupted": the holder the thread goes to; "" otherwise. */
  readonly to: string;
  constructor(lease: string, reason: StopReason, to: string, detail: string, options?: { cause?: unknown }) {
    super(`leasesvc: the run of ${JSON.stringify(lease)} was stopped (${reason}): ${detail}`, options);
    this.lease = lease;
    this.reason = reason;
    this.to = to;
  }
}

/**
 * Why a fenced write was refused:
 * - "no_holding": this process runs nothing on the thread (no current holding);
 * - "lost": the holding was lost (revoked, taken, its session ended);
 * - "deadline_passed": the holding's safe deadline passed (docs/contract.md §2);
 * - "no_proof": the holding came without a proof (a service without proofs, docs/contract.md §17);
 * - "stale": a higher fencing token of the thread's lease has written (the holder was deposed);
 * - the proof's refusals of docs/contract.md §17: "malformed", "bad_signature", "unknown_key", "wrong_issuer", "other_lease", "keys_unavailable".
 */
export type WriteRefusal = "no_holding" | "lost" | "deadline_passed" | "no_proof" | Exclude<fence.FenceReason, "missing">;

/** A state write was refused by the fence; nothing of it was stored (except where the message says it landed). */
export class FencedWriteError extends Error {
  override readonly name = "FencedWriteError";
  /** The lease that fences what was written. */
  readonly lease: string;
  /** Why: stable, see WriteRefusal. */
  readonly reason: WriteRefusal;
  constructor(lease: string, reason: WriteRefusal, detail: string, options?: { cause?: unknown }) {
    super(`leasesvc: write fenced by ${JSON.stringify(lease)} refused (${reason}): ${detail}`, options);
    this.lease = lease;
    this.reason = reason;
  }
}
