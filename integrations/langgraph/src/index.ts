/**
 * @leasesvc/langgraph: one run per LangGraph thread across replicas, and a
 * Firestore checkpoint saver whose every write is fenced by the thread's
 * lease (docs/contract.md §8, §14, §17; docs/agents.md, Frameworks).
 */
export { LeasedGraph } from "./graph.js";
export type { GraphLike, LeasedConfig, LeasedGraphOptions, StreamChunk } from "./graph.js";
export { FirestoreSaver, defaultCollectionPrefix, defaultThreadPrefix, deleteBatch } from "./saver.js";
export type { FirestoreSaverOptions } from "./saver.js";
export { Run, Runs, runsDefaults, strategies } from "./core/runs.js";
export type { BeginOptions, Fencing, RunsOptions, Strategy } from "./core/runs.js";
export { FencedWriteError, RunStoppedError, ThreadBusyError } from "./core/errors.js";
export type { BusyReason, StopReason, WriteRefusal } from "./core/errors.js";
export { FirestoreFence, defaultFenceCollection } from "./core/fenced.js";
export type { FenceOptions } from "./core/fenced.js";
export { checkPrefix, idPart, leaseName, maxPlainId, maxPrefix } from "./core/names.js";
