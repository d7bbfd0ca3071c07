/**
 * @leasesvc/client: the TypeScript SDK of leasesvc (docs/contract.md §12).
 *
 * Client calls the HTTP API with retries that are safe; Elector campaigns
 * for a lease and aborts its leading AbortSignal at once on lease_lost and
 * before the safe deadline, measured on performance.now(), when the service
 * cannot be reached. By default the Elector holds its lease through a
 * Session (Client.openSession, docs/contract.md §14), one WebSocket whose
 * heartbeats keep it, and falls back to plain renewals against a service
 * without sessions. The fence module verifies the proofs that come with
 * holdings (Lease.proof) and keeps sinks fenced (docs/contract.md §17).
 */
export { Client, defaultMaxAttempts, defaultRequestTimeoutMs } from "./client.js";
export { maxAnswerBytes } from "./sse.js";
export type { AcquireRequest, CallOptions, ClientOptions, ListRequest, ReleaseOptions, RenewRequest, RevokeRequest, TokenProvider, TransferRequest, WatchOptions } from "./client.js";
export { Elector, NotLeadingError, TransferredError, YieldedError, defaultHolder, electorDefaults, maxCheckpointBytes, maxPriority } from "./elector.js";
export type { ElectorLogger, ElectorOptions, RenewInfo, TermInfo } from "./elector.js";
export {
  CredentialsError,
  DeniedError,
  InternalError,
  InvalidArgumentError,
  LeaseError,
  LeaseHeldError,
  LeaseLostError,
  LeaseReservedError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitedError,
  SafeDeadlineError,
  UnauthenticatedError,
  UnavailableError,
} from "./errors.js";
export type { FieldError, LeaseErrorInit } from "./errors.js";
export { Keeper } from "./keeper.js";
export type { HoldOptions, KeeperLogger, KeeperMode, KeeperOptions } from "./keeper.js";
export { Holding, checkCheckpoint } from "./holding.js";
export type { HoldingEvent, HoldingState } from "./holding.js";
export { systemClock } from "./clock.js";
export type { Clock } from "./clock.js";
export { Session, SessionEndedError, SessionsUnsupportedError, silentMinMs, silentWindows } from "./session.js";
export type { HoldingWatcher, SessionAcquireRequest, SessionCallOptions, SessionOptions, SessionRenewRequest, SessionTransferRequest } from "./session.js";
export { isNewer, parseEvent } from "./event.js";
export type { EventType, LeaseEvent } from "./event.js";
export { parseLease, parseTime, validName } from "./lease.js";
export type { Lease, Page } from "./lease.js";
export { backoffDelay, defaultBackoff } from "./backoff.js";
export type { Backoff } from "./backoff.js";
export * as fence from "./fence.js";
