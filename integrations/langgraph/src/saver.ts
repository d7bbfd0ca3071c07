/**
 * FirestoreSaver: a LangGraph checkpoint saver on Firestore whose every
 * write (put, putWrites, deleteThread) runs in one transaction fenced by the
 * thread's lease (core/fenced.ts, docs/contract.md §17).
 *
 * Layout (collections under collectionPrefix, default "langgraph"):
 * - "{prefix}-checkpoints": one document per checkpoint (id: SHA-256 of
 *   [thread_id, checkpoint_ns, checkpoint_id]) with thread_id,
 *   checkpoint_ns, checkpoint_id, parent_checkpoint_id, the serialized
 *   checkpoint and metadata (bytes, with their serde type);
 * - "{prefix}-writes": one document per pending write (id: SHA-256 of
 *   [thread_id, checkpoint_ns, checkpoint_id, task_id, idx]) with task_id,
 *   task_path, idx, channel and the serialized value;
 * - "{prefix}-blobs": one document per channel value (id: SHA-256 of
 *   [thread_id, checkpoint_ns, channel, version]), written by the put whose
 *   newVersions name it, so a step rewrites only the channels it changed;
 *   a checkpoint document keeps the channel versions, and a read joins the
 *   values of those versions back in;
 * - "{prefix}-heads": one document per (thread_id, checkpoint_ns) naming its
 *   latest checkpoint_id, so that getTuple of the latest reads two
 *   documents and one query.
 * Queries are equalities only (thread_id, checkpoint_ns, checkpoint_id), so
 * no composite index is needed. A checkpoint is one document: at most
 * 1 MiB, Firestore's limit.
 */
import { createHash } from "node:crypto";
import type { DocumentReference, DocumentSnapshot, Firestore, Query, Transaction } from "@google-cloud/firestore";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
  TASKS,
  WRITES_IDX_MAP,
  compareWritesSortKeys,
  copyCheckpoint,
  getCheckpointId,
  maxChannelVersion,
  writesSortKey,
} from "@langchain/langgraph-checkpoint";
import type { fence } from "@leasesvc/client";
import { FirestoreFence } from "./core/fenced.js";
import { leaseName } from "./core/names.js";
import type { Fencing } from "./core/runs.js";

/** The lease prefix of threads unless told otherwise: thread "t1" is lease "langgraph.thread.t1". */
export const defaultThreadPrefix = "langgraph.thread";

/** The collection prefix unless told otherwise. */
export const defaultCollectionPrefix = "langgraph";

/** The most documents one fenced transaction of deleteThread deletes; a longer thread is deleted in several. */
export const deleteBatch = 400;

/** Options of FirestoreSaver. */
export interface FirestoreSaverOptions {
  /** The database. */
  db: Firestore;
  /** Verifies proofs (docs/contract.md §17). */
  verifier: fence.Verifier;
  /** Hands out the proof of the current holding of a thread: the Runs that runs the threads. */
  fencing: Fencing;
  /** The lease prefix of threads. Default "langgraph.thread". */
  threadPrefix?: string;
  /** The prefix of the collections. Default "langgraph". */
  collectionPrefix?: string;
  /** The collection of the fencing tokens. Default "leasesvc-fence" (the Go package fence/firestorefence's). */
  fenceCollection?: string;
  /** The serializer. Default LangGraph's JsonPlusSerializer. */
  serde?: SerializerProtocol;
}

interface CheckpointDoc {
  thread_id: string;
  checkpoint_ns: string;
  checkpoint_id: string;
  parent_checkpoint_id: string | null;
  type: string;
  checkpoint: Uint8Array;
  metadata_type: string;
  metadata: Uint8Array;
}

interface WriteDoc {
  thread_id: string;
  checkpoint_ns: string;
  checkpoint_id: string;
  task_id: string;
  task_path: string;
  idx: number;
  channel: string;
  type: string;
  value: Uint8Array;
}

interface BlobDoc {
  thread_id: string;
  checkpoint_ns: string;
  channel: string;
  version: string;
  type: string;
  value: Uint8Array;
}

interface HeadDoc {
  thread_id: string;
  checkpoint_ns: string;
  checkpoint_id: string;
}

/** docId is the hex SHA-256 of the JSON of parts: a Firestore document id for any strings. */
function docId(...parts: Array<string | number>): string {
  return createHash("sha256").update(JSON.stringify(parts), "utf8").digest("hex");
}

function str(v: unknown, what: string, allowEmpty = false): string {
  if (typeof v !== "string" || (!allowEmpty && v === "")) throw new Error(`leasesvc FirestoreSaver: ${what} must be a${allowEmpty ? "" : " non-empty"} string, got ${JSON.stringify(v)}`);
  return v;
}

function bytes(v: unknown): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (typeof v === "string") return new TextEncoder().encode(v);
  return new Uint8Array(0);
}

/** FirestoreSaver is a checkpoint saver on Firestore, fenced by each thread's lease, as the module's doc says. */
export class FirestoreSaver extends BaseCheckpointSaver {
  readonly db: Firestore;
  /** The fence its writes go through. */
  readonly fence: FirestoreFence;
  readonly threadPrefix: string;
  readonly #checkpoints: string;
  readonly #writes: string;
  readonly #heads: string;
  readonly #blobs: string;

  constructor(o: FirestoreSaverOptions) {
    super(o.serde);
    this.db = o.db;
    this.fence = new FirestoreFence(o);
    this.threadPrefix = o.threadPrefix ?? defaultThreadPrefix;
    leaseName(this.threadPrefix, "x"); // checks the prefix
    const p = o.collectionPrefix ?? defaultCollectionPrefix;
    this.#checkpoints = `${p}-checkpoints`;
    this.#writes = `${p}-writes`;
    this.#heads = `${p}-heads`;
    this.#blobs = `${p}-blobs`;
  }

  /** The lease that stands for thread threadId. */
  leaseOf(threadId: string): string {
    return leaseName(this.threadPrefix, threadId);
  }

  /** Stores the current holding's token for the thread before a run reads it (FirestoreFence.fenceFirst). */
  async fenceFirst(threadId: string): Promise<void> {
    await this.fence.fenceFirst(this.leaseOf(threadId));
  }

  #cpRef(tid: string, ns: string, cid: string): DocumentReference {
    return this.db.collection(this.#checkpoints).doc(docId(tid, ns, cid));
  }

  #blobRef(tid: string, ns: string, channel: string, version: number | string): DocumentReference {
    return this.db.collection(this.#blobs).doc(docId(tid, ns, channel, String(version)));
  }

  /** Joins the values of the checkpoint's channel versions back in (the blobs its puts wrote). */
  async #loadBlobs(cp: Checkpoint, tid: string, ns: string): Promise<void> {
    const entries = Object.entries(cp.channel_versions ?? {});
    const values: Record<string, unknown> = { ...(cp.channel_values ?? {}) };
    if (entries.length > 0) {
      const snaps = await this.db.getAll(...entries.map(([ch, v]) => this.#blobRef(tid, ns, ch, v)));
      for (const [i, snap] of snaps.entries()) {
        if (!snap.exists) continue;
        const b = snap.data() as BlobDoc;
        values[entries[i]![0]] = await this.serde.loadsTyped(b.type, bytes(b.value));
      }
    }
    (cp as { channel_values: Record<string, unknown> }).channel_values = values;
  }

  #headRef(tid: string, ns: string): DocumentReference {
    return this.db.collection(this.#heads).doc(docId(tid, ns));
  }

  #writesOf(tid: string, ns: string, cid: string): Query {
    return this.db.collection(this.#writes).where("thread_id", "==", tid).where("checkpoint_ns", "==", ns).where("checkpoint_id", "==", cid);
  }

  /** The pending writes of a checkpoint, in LangGraph's order (writesSortKey). */
  async #pendingWrites(tid: string, ns: string, cid: string): Promise<CheckpointPendingWrite[]> {
    const snap = await this.#writesOf(tid, ns, cid).get();
    const docs = snap.docs.map((d) => d.data() as WriteDoc);
    docs.sort((a, b) => compareWritesSortKeys(writesSortKey(a.task_path ?? "", a.task_id, a.idx), writesSortKey(b.task_path ?? "", b.task_id, b.idx)));
    return Promise.all(docs.map(async (w): Promise<CheckpointPendingWrite> => [w.task_id, w.channel, await this.serde.loadsTyped(w.type, bytes(w.value))]));
  }

  /** The tuple of a stored checkpoint document. */
  async #tuple(d: CheckpointDoc, config: RunnableConfig | undefined): Promise<CheckpointTuple> {
    const checkpoint = (await this.serde.loadsTyped(d.type, bytes(d.checkpoint))) as Checkpoint;
    await this.#loadBlobs(checkpoint, d.thread_id, d.checkpoint_ns);
    const parent = d.parent_checkpoint_id ?? undefined;
    if (checkpoint.v < 4 && parent !== undefined) await this.#migratePendingSends(checkpoint, d.thread_id, d.checkpoint_ns, parent);
    const t: CheckpointTuple = {
      config: config ?? { configurable: { thread_id: d.thread_id, checkpoint_ns: d.checkpoint_ns, checkpoint_id: d.checkpoint_id } },
      checkpoint,
      metadata: (await this.serde.loadsTyped(d.metadata_type, bytes(d.metadata))) as CheckpointMetadata,
      pendingWrites: await this.#pendingWrites(d.thread_id, d.checkpoint_ns, d.checkpoint_id),
    };
    if (parent !== undefined) t.parentConfig = { configurable: { thread_id: d.thread_id, checkpoint_ns: d.checkpoint_ns, checkpoint_id: parent } };
    return t;
  }

  /** Checkpoints before v4 kept pending sends as writes of the parent (as MemorySaver migrates them). */
  async #migratePendingSends(cp: Checkpoint, tid: string, ns: string, parent: string): Promise<void> {
    const snap = await this.#writesOf(tid, ns, parent).where("channel", "==", TASKS).get();
    const docs = snap.docs.map((d) => d.data() as WriteDoc);
    docs.sort((a, b) => compareWritesSortKeys(writesSortKey(a.task_path ?? "", a.task_id, a.idx), writesSortKey(b.task_path ?? "", b.task_id, b.idx)));
    const m = cp as Checkpoint & { channel_values: Record<string, unknown>; channel_versions: Record<string, number | string> };
    m.channel_values ??= {};
    m.channel_values[TASKS] = await Promise.all(docs.map((w) => this.serde.loadsTyped(w.type, bytes(w.value))));
    m.channel_versions ??= {};
    const versions = Object.values(m.channel_versions);
    m.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    if (config.configurable?.["thread_id"] === undefined) return undefined;
    const tid = str(config.configurable?.["thread_id"], "configurable.thread_id");
    const ns = str(config.configurable?.["checkpoint_ns"] ?? "", "configurable.checkpoint_ns", true);
    let cid = getCheckpointId(config);
    let given: RunnableConfig | undefined = config;
    if (!cid) {
      const head = await this.#headRef(tid, ns).get();
      if (!head.exists) return undefined;
      cid = (head.data() as HeadDoc).checkpoint_id;
      given = undefined;
    }
    const snap = await this.#cpRef(tid, ns, cid).get();
    if (!snap.exists) return undefined;
    return this.#tuple(snap.data() as CheckpointDoc, given);
  }

  async *list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple> {
    const { before, filter } = options ?? {};
    let limit = options?.limit;
    let q: Query = this.db.collection(this.#checkpoints);
    const tid = config.configurable?.["thread_id"];
    const ns = config.configurable?.["checkpoint_ns"];
    const cid = config.configurable?.["checkpoint_id"];
    if (tid !== undefined && tid !== "") q = q.where("thread_id", "==", str(tid, "configurable.thread_id"));
    if (ns !== undefined) q = q.where("checkpoint_ns", "==", str(ns, "configurable.checkpoint_ns", true));
    if (cid) q = q.where("checkpoint_id", "==", str(cid, "configurable.checkpoint_id"));
    const docs = (await q.get()).docs.map((d) => d.data() as CheckpointDoc);
    // Grouped by thread and namespace, newest first in each (checkpoint ids sort by time).
    docs.sort((a, b) => cmp(a.thread_id, b.thread_id) || cmp(a.checkpoint_ns, b.checkpoint_ns) || cmp(b.checkpoint_id, a.checkpoint_id));
    const beforeId = before?.configurable?.["checkpoint_id"] as string | undefined;
    for (const d of docs) {
      if (beforeId && d.checkpoint_id >= beforeId) continue;
      const metadata = (await this.serde.loadsTyped(d.metadata_type, bytes(d.metadata))) as Record<string, unknown>;
      if (filter && !Object.entries(filter).every(([k, v]) => metadata[k] === v)) continue;
      if (limit !== undefined) {
        if (limit <= 0) break;
        limit -= 1;
      }
      yield await this.#tuple(d, undefined);
    }
  }

  async put(config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, newVersions: ChannelVersions): Promise<RunnableConfig> {
    const tid = str(config.configurable?.["thread_id"], "configurable.thread_id (a checkpointer needs a thread_id)");
    const ns = str(config.configurable?.["checkpoint_ns"] ?? "", "configurable.checkpoint_ns", true);
    const cid = str(checkpoint.id, "checkpoint.id");
    const parent = config.configurable?.["checkpoint_id"];
    const copy = copyCheckpoint(checkpoint);
    const values = (copy.channel_values ?? {}) as Record<string, unknown>;
    (copy as { channel_values: Record<string, unknown> }).channel_values = {};
    const blobs = await Promise.all(
      Object.entries(newVersions)
        .filter(([ch]) => Object.prototype.hasOwnProperty.call(values, ch))
        .map(async ([ch, version]): Promise<{ ref: DocumentReference; doc: BlobDoc }> => {
          const [type, v] = await this.serde.dumpsTyped(values[ch]);
          return { ref: this.#blobRef(tid, ns, ch, version), doc: { thread_id: tid, checkpoint_ns: ns, channel: ch, version: String(version), type, value: Buffer.from(v) } };
        }),
    );
    const [[type, cp], [metadataType, md]] = await Promise.all([this.serde.dumpsTyped(copy), this.serde.dumpsTyped(metadata)]);
    const doc: CheckpointDoc = {
      thread_id: tid,
      checkpoint_ns: ns,
      checkpoint_id: cid,
      parent_checkpoint_id: typeof parent === "string" && parent !== "" ? parent : null,
      type,
      checkpoint: Buffer.from(cp),
      metadata_type: metadataType,
      metadata: Buffer.from(md),
    };
    const head = this.#headRef(tid, ns);
    await this.fence.write(this.leaseOf(tid), async (tx) => {
      const h = await tx.get(head);
      tx.set(this.#cpRef(tid, ns, cid), doc);
      for (const b of blobs) tx.set(b.ref, b.doc);
      const latest = h.exists ? (h.data() as HeadDoc).checkpoint_id : "";
      if (cid >= latest) tx.set(head, { thread_id: tid, checkpoint_ns: ns, checkpoint_id: cid } satisfies HeadDoc);
    });
    return { configurable: { thread_id: tid, checkpoint_ns: ns, checkpoint_id: cid } };
  }

  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath?: string): Promise<void> {
    const tid = str(config.configurable?.["thread_id"], "configurable.thread_id (a checkpointer needs a thread_id)");
    const ns = str(config.configurable?.["checkpoint_ns"] ?? "", "configurable.checkpoint_ns", true);
    const cid = str(config.configurable?.["checkpoint_id"], "configurable.checkpoint_id");
    str(taskId, "taskId");
    const rows = await Promise.all(
      writes.map(async ([channel, value], i): Promise<{ ref: DocumentReference; doc: WriteDoc }> => {
        const idx = WRITES_IDX_MAP[channel] ?? i;
        const [type, v] = await this.serde.dumpsTyped(value);
        const doc: WriteDoc = { thread_id: tid, checkpoint_ns: ns, checkpoint_id: cid, task_id: taskId, task_path: taskPath ?? "", idx, channel, type, value: Buffer.from(v) };
        return { ref: this.db.collection(this.#writes).doc(docId(tid, ns, cid, taskId, idx)), doc };
      }),
    );
    if (rows.length === 0) return;
    await this.fence.write(this.leaseOf(tid), async (tx) => {
      // A regular write (idx ≥ 0) already stored is kept; the special channels' (idx < 0) are replaced, as MemorySaver does.
      const kept = rows.filter((r) => r.doc.idx >= 0);
      const seen: DocumentSnapshot[] = kept.length > 0 ? await tx.getAll(...kept.map((r) => r.ref)) : [];
      const exists = new Set(seen.filter((s) => s.exists).map((s) => s.ref.path));
      for (const r of rows) if (r.doc.idx < 0 || !exists.has(r.ref.path)) tx.set(r.ref, r.doc);
    });
  }

  async deleteThread(threadId: string): Promise<void> {
    const tid = str(threadId, "threadId");
    const lease = this.leaseOf(tid);
    const queries = [this.#heads, this.#checkpoints, this.#writes, this.#blobs].map((c) => this.db.collection(c).where("thread_id", "==", tid));
    for (;;) {
      const n = await this.fence.write(lease, async (tx: Transaction) => {
        const refs: DocumentReference[] = [];
        for (const q of queries) {
          if (refs.length >= deleteBatch) break;
          const snap = await tx.get(q.limit(deleteBatch - refs.length));
          refs.push(...snap.docs.map((d) => d.ref));
        }
        for (const r of refs) tx.delete(r);
        return refs.length;
      });
      if (n < deleteBatch) return;
    }
  }
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
