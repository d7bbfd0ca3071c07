import type { Lease } from "./lease.js";

/** One bad field of a refused request (invalid_argument). */
export interface FieldError {
  /** The request field, such as "ttlMs". */
  field: string;
  /** What is wrong with it. */
  detail: string;
}

/** What a LeaseError is built from. */
export interface LeaseErrorInit {
  /** HTTP status; 0 when no answer arrived. */
  status?: number;
  /** The problem's stable code; defaults to the class's code. */
  code?: string;
  /** The problem's human-readable detail. */
  detail?: string;
  /** The bad fields of an invalid_argument problem. */
  fields?: FieldError[];
  /** The Retry-After header in milliseconds, 0 when absent. */
  retryAfterMs?: number;
  /** The transport error when no answer arrived. */
  cause?: unknown;
}

/**
 * Every error the Client throws for an answer of the service, or for a
 * failed exchange with it, is a LeaseError: test with `instanceof` against
 * the subclasses, which mirror the Go SDK's sentinels (ErrHeld, ErrLost,
 * ErrNotFound, ErrInvalid, ErrUnavailable, ErrDenied, ErrInternal, …).
 * `code` is the API's code string (docs/contract.md §4), such as
 * "lease_lost".
 */
export class LeaseError extends Error {
  /** The code a subclass stands for when the answer carried none. */
  static readonly defaultCode: string = "internal";
  /** HTTP status; 0 when no answer arrived. */
  readonly status: number;
  /** The API's error code, such as "lease_lost" or "resource_exhausted". */
  readonly code: string;
  /** The problem's human-readable detail. */
  readonly detail: string;
  /** The bad fields of an invalid_argument problem. */
  readonly fields: FieldError[];
  /** The Retry-After header in milliseconds, 0 when absent. */
  readonly retryAfterMs: number;

  constructor(message: string, init: LeaseErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.status = init.status ?? 0;
    this.code = init.code || (new.target as typeof LeaseError).defaultCode;
    this.detail = init.detail ?? "";
    this.fields = init.fields ?? [];
    this.retryAfterMs = init.retryAfterMs ?? 0;
  }
}

/**
 * An acquire found the lease held by another holder (409 lease_held). It
 * carries the current lease: who leads, with which token, until when.
 */
export class LeaseHeldError extends LeaseError {
  static override readonly defaultCode: string = "lease_held";
  /** The current lease, held by another holder. */
  readonly lease: Lease;
  constructor(lease: Lease, init: LeaseErrorInit = {}) {
    super(`leasesvc: lease "${lease.name}" held by "${lease.holder}" (fencing token ${lease.fencingToken})`, {
      status: 409,
      ...init,
    });
    this.lease = lease;
  }
}

/**
 * An acquire found the lease free but reserved for another holder (409
 * lease_reserved, docs/contract.md §8): the best waiting candidate after a
 * holding ended, or the successor a transfer named. A reservation lasts
 * seconds: a waiting acquire keeps waiting through it.
 */
export class LeaseReservedError extends LeaseError {
  static override readonly defaultCode: string = "lease_reserved";
  /** The lease as the service saw it when it refused. */
  readonly lease: Lease;
  /** The holder the lease is reserved for. */
  readonly reservedFor: string;
  /** Server time at which the reservation lapses at the latest; null if the answer did not say. */
  readonly reservedUntil: Date | null;
  constructor(lease: Lease, reservedFor: string, reservedUntil: Date | null, init: LeaseErrorInit = {}) {
    super(`leasesvc: lease "${lease.name}" reserved for "${reservedFor}"${reservedUntil ? " until " + reservedUntil.toISOString() : ""}`, {
      status: 409,
      ...init,
    });
    this.lease = lease;
    this.reservedFor = reservedFor;
    this.reservedUntil = reservedUntil;
  }
}

/** A renew or release by someone who is not the current live holding (409 lease_lost): stop acting as leader now. */
export class LeaseLostError extends LeaseError {
  static override readonly defaultCode: string = "lease_lost";
}

/** The lease never existed (get), or the route is unknown (404 not_found). */
export class NotFoundError extends LeaseError {
  static override readonly defaultCode: string = "not_found";
}

/**
 * The service refused the request's arguments (400 invalid_argument, and
 * also 405, 413, 415): retrying the same request cannot succeed. `fields`
 * lists each bad field.
 */
export class InvalidArgumentError extends LeaseError {
  static override readonly defaultCode: string = "invalid_argument";
}

/**
 * The service could not be reached or could not answer (connection errors,
 * timeouts, 502, 503, 504, 429), and retries did not help before the
 * attempts ran out or the signal was aborted.
 */
export class UnavailableError extends LeaseError {
  static override readonly defaultCode: string = "unavailable";
}

/**
 * The caller's rate limit (429 resource_exhausted), still refused after
 * retries, each sent no earlier than the answer's Retry-After. Also an
 * UnavailableError.
 */
export class RateLimitedError extends UnavailableError {
  static override readonly defaultCode: string = "resource_exhausted";
}

/** The service refused the credentials or the policy denies the call (401, 403). Not retried. */
export class DeniedError extends LeaseError {
  static override readonly defaultCode: string = "permission_denied";
}

/** No credentials, or credentials the service refused (401 unauthenticated). Also a DeniedError. */
export class UnauthenticatedError extends DeniedError {
  static override readonly defaultCode: string = "unauthenticated";
}

/** The policy does not grant the caller this verb on this lease (403 permission_denied). Also a DeniedError. */
export class PermissionDeniedError extends DeniedError {
  static override readonly defaultCode: string = "permission_denied";
}

/** Any other failure of the service (500, an answer the client cannot read). */
export class InternalError extends LeaseError {
  static override readonly defaultCode: string = "internal";
}

/**
 * The token provider gave no token (it threw, gave an empty one, or did not
 * answer within the request timeout), so the request was not sent. `cause`
 * is the provider's own error. Not retried by the Client; an Elector
 * retries it at its own pace.
 */
export class CredentialsError extends LeaseError {
  static override readonly defaultCode: string = "credentials";
}

/**
 * The reason of a leading signal aborted because no renew succeeded before
 * the safe deadline (docs/contract.md §2). `cause` is the last renew's
 * error.
 */
export class SafeDeadlineError extends Error {
  /** A stable code, for logs and the conformance agent. */
  readonly code = "safe_deadline";
  constructor(cause: unknown) {
    super("leasesvc: safe deadline reached without a successful renew", { cause });
    this.name = "SafeDeadlineError";
  }
}

type ErrorClass = new (message: string, init?: LeaseErrorInit) => LeaseError;

/**
 * errorClassOf maps a problem code (or, without one, an HTTP status) to its
 * error class: the one place where the wire's codes become errors.
 */
export function errorClassOf(status: number, code: string): ErrorClass {
  switch (code) {
    case "lease_held": // a refusal without the lease in its body (with it: LeaseHeldError)
    case "lease_reserved": // likewise (with it: LeaseReservedError)
      return LeaseError;
    case "lease_lost":
      return LeaseLostError;
    case "session_held": // a REST renew or acquire of a holding held through a session (docs/contract.md §14)
      return LeaseError;
    case "session_not_found":
      return NotFoundError;
    case "session_conflict": // a racing resume of the same session won: resuming again may succeed
      return UnavailableError;
    case "not_found":
      return NotFoundError;
    case "invalid_argument":
    case "payload_too_large":
    case "unsupported_media_type":
    case "method_not_allowed":
      return InvalidArgumentError;
    case "unavailable":
    case "deadline_exceeded":
      return UnavailableError;
    case "resource_exhausted":
      return RateLimitedError;
    case "unauthenticated":
      return UnauthenticatedError;
    case "permission_denied":
      return PermissionDeniedError;
    case "internal":
      return InternalError;
  }
  if (status === 404) return NotFoundError;
  if (status === 401) return UnauthenticatedError;
  if (status === 403) return PermissionDeniedError;
  if (status === 429) return RateLimitedError;
  if (transientStatus(status)) return UnavailableError;
  if (status >= 400 && status < 500) return InvalidArgumentError;
  return InternalError;
}

/** transientStatus reports whether the same request may succeed when sent again. */
export function transientStatus(status: number): boolean {
  return status === 429 || status === 502 || status === 503 || status === 504;
}

/** errorText is an error's message, or what else was thrown as a string. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
