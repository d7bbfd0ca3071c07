/**
 * @leasesvc/client: the TypeScript SDK of leasesvc (docs/contract.md §12).
 *
 * Client calls the HTTP API with retries that are safe; Keeper keeps
 * leases (through a Session, docs/contract.md §14, one WebSocket whose
 * heartbeats keep them, or by plain renewals against a service without
 * sessions) and owns their deadlines; Elector, built on a Keeper, campaigns
 * for a lease and aborts its leading AbortSignal at once on lease_lost and
 * at stopTime(the deadline, cancelBeforeMs), on the keeper's monotonic
 * clock, when the service cannot be reached. The fence module verifies the proofs that come with
 * holdings (Lease.proof) and keeps sinks fenced (docs/contract.md §17).
 */
export { Client, defaultMaxAttempts, defaultRequestTimeoutMs } from "./client.js";
export { maxAnswerBytes } from "./sse.js";
export type { AcquireRequest, CallOptions, ClientOptions, ListRequest, ReleaseOptions, RenewRequest, RevokeRequest, TokenProvider, TransferRequest, WatchOptions } from "./client.js";
export { Elector, NotLeadingError, TransferredError, YieldedError, defaultHolder, electorDefaults, maxCheckpointBytes, maxPriority } from "./elector.js";
export type { ElectorCallbacks, ElectorLogger, ElectorOptions, LegacyElectorOptions, RenewInfo, TermInfo } from "./elector.js";
export { cancelBeforeFits, cancelBeforeFor, cancelBeforeLimit, deadlineOf, defaultCancelBefore, defaultCancelBeforeMaxMs, safeSpan, stopTime } from "./deadline.js";
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
export type { HoldOptions, KeeperLogger, KeeperMode, KeeperModeInfo, KeeperOptions, PlainReason } from "./keeper.js";
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
