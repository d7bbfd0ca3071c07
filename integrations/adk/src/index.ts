/**
 * @leasesvc/adk: one ADK run per session across replicas, and a Firestore
 * session service whose every write is fenced by the session's lease
 * (docs/contract.md §8, §14, §17; docs/agents.md, Frameworks).
 */
export { LeasedRunner } from "./runner.js";
export type { LeasedRunParams, LeasedRunnerOptions } from "./runner.js";
export { FirestoreSessionService, SessionStateError, defaultCollectionPrefix, defaultSessionPrefix, deleteBatch } from "./sessions.js";
export type { FirestoreSessionServiceOptions, SessionKey } from "./sessions.js";
export { Run, Runs, runsDefaults, strategies } from "./core/runs.js";
export type { BeginOptions, Fencing, RunsOptions, Strategy } from "./core/runs.js";
export { FencedWriteError, RunStoppedError, ThreadBusyError } from "./core/errors.js";
export type { BusyReason, StopReason, WriteRefusal } from "./core/errors.js";
export { FirestoreFence, defaultFenceCollection } from "./core/fenced.js";
export type { FenceOptions } from "./core/fenced.js";
export { checkPrefix, idPart, leaseName, maxPlainId, maxPrefix } from "./core/names.js";
