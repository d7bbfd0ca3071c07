import { type Backoff, backoffDelay, backoffWithDefaults, sleep } from "./backoff.js";
import {
  CredentialsError,
  errorClassOf,
  errorText,
  type FieldError,
  InternalError,
  LeaseError,
  LeaseHeldError,
  LeaseReservedError,
  RateLimitedError,
  UnavailableError,
} from "./errors.js";
import { type LeaseEvent } from "./event.js";
import { type Lease, type Page, parseLease, parseTime } from "./lease.js";
import { checkSendable, protocolText, unsafeOrdering } from "./safeint.js";
import { Session, type SessionOptions } from "./session.js";
import { readAnswer, readEvents } from "./sse.js";

/**
 * Credentials: a static bearer token, or a function returning one (sync or
 * async), called before every attempt of every request, watch streams
 * included, so that it can refresh an expiring token. The token is sent as
 * "Authorization: Bearer …" and, the same, as "X-Serverless-Authorization"
 * (a Cloud Run service that requires authentication checks that header and
 * passes Authorization on to leasesvc untouched).
 */
export type TokenProvider = string | (() => string | Promise<string>);

/** Options of a Client. Every field has a default. */
export interface ClientOptions {
  /** Credentials; default none. An empty static token sends none. */
  token?: TokenProvider;
  /** Bounds one attempt of one request, not counting the time an acquire may wait (waitMs). Default 10,000 ms. */
  requestTimeoutMs?: number;
  /**
   * How many times a request is sent in all when the service is unreachable
   * or answers 429, 502, 503 or 504, ≥ 1. Default 4.
   */
  maxAttempts?: number;
  /**
   * Spaces the retries. Default 100 ms … 2 s, doubling, jittered. A 503's
   * Retry-After lengthens a delay up to maxMs; a 429's Retry-After (the
   * caller's own rate limit) is waited in full.
   */
  backoff?: Partial<Backoff>;
  /** Sent with every request. Default "leasesvc-typescript-client". */
  userAgent?: string;
  /** The fetch to use. Default globalThis.fetch. */
  fetch?: typeof fetch;
}

/** Options of one call. */
export interface CallOptions {
  /** Aborting it abandons the call (and its retries); the call rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Bounds each attempt instead of ClientOptions.requestTimeoutMs. */
  timeoutMs?: number;
  /** Replaces ClientOptions.maxAttempts for this call. */
  maxAttempts?: number;
}

/** Asks for a lease. */
export interface AcquireRequest {
  /** The caller's identity, 1–256 printable characters. */
  holder: string;
  /** The lease duration in whole milliseconds (1,000 … 3,600,000 by default on the service). */
  ttlMs: number;
  /** A JSON object (≤ 16 KiB) attached to the lease; omitted keeps what a repeated acquire finds stored. */
  metadata?: Record<string, unknown>;
  /** If positive, the service waits up to this long (≤ 60,000 ms) for a holding by another to end before answering lease_held. */
  waitMs?: number;
  /**
   * 0 … 1000, recorded on the holding this acquire begins (docs/contract.md
   * §8). A waiting acquire that carries it (even 0) is a candidate: when a
   * holding ends, the lease is reserved for a few seconds for the best
   * waiting candidate (highest priority, then the one waiting longest).
   * Omitted: the acquire behaves as before succession existed.
   */
  priority?: number;
  /**
   * On a waiting acquire, asks a holder whose holding has a strictly lower
   * priority to step down (its renewals answer yieldRequested). Nothing is
   * taken by force. Needs waitMs > 0 (the service refuses it otherwise);
   * sends priority 0 when priority is omitted.
   */
  preempt?: boolean;
}

/** Extends a holding. */
export interface RenewRequest {
  /** The holder of the holding. */
  holder: string;
  /** The fencing token of the holding. */
  fencingToken: number;
  /** If positive, replaces the holding's lease duration. */
  ttlMs?: number;
  /** If given, replaces the stored metadata. */
  metadata?: Record<string, unknown>;
  /** If given, a JSON object (≤ 16 KiB) that replaces the lease's checkpoint, which the next holder inherits (docs/contract.md §8). */
  checkpoint?: Record<string, unknown>;
}

/** Options of a release: a call's options, and the checkpoint it writes. */
export interface ReleaseOptions extends CallOptions {
  /** If given, a JSON object (≤ 16 KiB) written as the lease's checkpoint: the next holder inherits it (docs/contract.md §8). */
  checkpoint?: Record<string, unknown>;
}

/** Hands a holding over to a named successor (docs/contract.md §8). */
export interface TransferRequest {
  /** The holder of the holding. */
  holder: string;
  /** The fencing token of the holding. */
  fencingToken: number;
  /** The successor: another holder. */
  to: string;
  /** If given, a JSON object (≤ 16 KiB) written as the lease's checkpoint, which the successor inherits. */
  checkpoint?: Record<string, unknown>;
  /** How long the lease stays reserved for the successor, 1 … 60,000 ms; omitted: the service's default, 5,000. */
  reserveMs?: number;
  /**
   * With authentication on, the principal whose acquire as `to` takes the
   * reserved lease (the successor's); omitted: the caller's own. The
   * service refuses it without authentication.
   */
  toPrincipal?: string;
}

/** Asks for a page of leases. */
export interface ListRequest {
  /** Keeps only names that start with it. */
  prefix?: string;
  /** The most leases per page (0: the service's default, 100; at most 1,000). */
  pageSize?: number;
  /** The previous page's nextPageToken; empty for the first. */
  pageToken?: string;
}

/** Asks an operator's revocation of a holding. */
export interface RevokeRequest {
  /** Why, 1–512 printable characters; required. */
  reason: string;
  /** If positive, revokes only the holding with this token (otherwise lease_lost, nothing changes). */
  fencingToken?: number;
}

/** Options of a watch stream. */
export interface WatchOptions {
  /** Aborting it ends the stream: the iteration finishes without an error. */
  signal?: AbortSignal;
  /** Sent as Last-Event-ID on the first connection (a later one sends the last id seen). */
  lastEventId?: string;
  /** How long the stream may stay silent before it is taken for dead and reconnected. Default 45,000 ms (three missed heartbeats). */
  idleTimeoutMs?: number;
}

/** The default per-attempt timeout of a Client. */
export const defaultRequestTimeoutMs = 10_000;
/** The default number of attempts of a Client. */
export const defaultMaxAttempts = 4;
const defaultIdleTimeoutMs = 45_000;

/** Internal options of a call: what the Elector and revoke adjust. */
interface CallPlan {
  /** Added to the attempt timeout: an acquire's wait. */
  extraMs?: number;
  /** A repeat may do what the first attempt did not mean (revoke): retry only failures that show the service did not act. */
  notIdempotent?: boolean;
}

class AttemptTimeout extends Error {
  constructor(ms: number) {
    super(`no answer within ${ms} ms`);
    this.name = "AttemptTimeout";
  }
}

/**
 * Client calls the leasesvc HTTP API (docs/contract.md §4).
 *
 * Transient failures (connection errors, per-attempt timeouts, 429, 502,
 * 503, 504) are retried with capped, jittered exponential backoff. Retrying
 * is safe for every operation but revoke: an acquire repeated by the same
 * holder returns the same holding, a repeated release succeeds, and a renew
 * whose answer was lost is simply renewed again. Every other refusal (401
 * and 403 included) is thrown at once, as a subclass of LeaseError.
 */
export class Client {
  /** The service's base URL, without a trailing slash. */
  readonly baseUrl: string;
  /** The per-attempt timeout in ms. */
  readonly requestTimeoutMs: number;
  /** How many times a request is sent at most. */
  readonly maxAttempts: number;
  /** The retry backoff. */
  readonly backoff: Backoff;
  readonly #token: TokenProvider | undefined;
  readonly #userAgent: string;
  readonly #fetch: typeof fetch;

  /** Returns a Client of the service at baseUrl, such as "http://localhost:8080". */
  constructor(baseUrl: string, options: ClientOptions = {}) {
    let u: URL;
    try {
      u = new URL(baseUrl);
    } catch {
      throw new TypeError(`leasesvc Client: base URL ${JSON.stringify(baseUrl)} must be http(s)://host[:port]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
      throw new TypeError(`leasesvc Client: base URL ${JSON.stringify(baseUrl)} must be http(s)://host[:port]`);
    }
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    const timeout = options.requestTimeoutMs ?? defaultRequestTimeoutMs;
    if (!(timeout > 0)) throw new RangeError(`leasesvc Client: requestTimeoutMs ${timeout} must be positive`);
    this.requestTimeoutMs = timeout;
    const attempts = options.maxAttempts ?? defaultMaxAttempts;
    if (!Number.isInteger(attempts) || attempts < 1) throw new RangeError(`leasesvc Client: maxAttempts ${attempts} must be an integer ≥ 1`);
    this.maxAttempts = attempts;
    this.backoff = backoffWithDefaults(options.backoff, "ClientOptions.backoff");
    this.#token = options.token;
    this.#userAgent = options.userAgent ?? "leasesvc-typescript-client";
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /**
   * Takes the lease if it is free or expired (a new fencing token), or
   * extends the caller's own live holding (same token). Held by another:
   * throws LeaseHeldError with the current lease.
   */
  async acquire(name: string, req: AcquireRequest, opts: CallOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = { holder: req.holder, ttlMs: req.ttlMs };
    if (req.metadata !== undefined) body["metadata"] = req.metadata;
    const waitMs = Math.max(0, req.waitMs ?? 0);
    if (waitMs > 0) body["waitMs"] = waitMs;
    if (req.priority !== undefined || req.preempt === true) body["priority"] = req.priority ?? 0;
    if (req.preempt === true) body["preempt"] = true;
    return parseLease(await this.#call("acquire", name, "POST", leasePath(name, ":acquire"), body, opts, { extraMs: waitMs }));
  }

  /**
   * Extends the holding named by holder and token: expireTime = serverTime +
   * ttl. Anything but the current live holding throws LeaseLostError: stop
   * acting as leader now.
   */
  async renew(name: string, req: RenewRequest, opts: CallOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = { holder: req.holder, fencingToken: req.fencingToken };
    if (req.ttlMs !== undefined && req.ttlMs > 0) body["ttlMs"] = req.ttlMs;
    if (req.metadata !== undefined) body["metadata"] = req.metadata;
    if (req.checkpoint !== undefined) body["checkpoint"] = req.checkpoint;
    return parseLease(await this.#call("renew", name, "POST", leasePath(name, ":renew"), body, opts));
  }

  /**
   * Ends the holding named by holder and token now; the next acquire gets
   * token + 1. Repeating it succeeds while nobody has acquired since.
   * Anything else throws LeaseLostError. opts.checkpoint, if given, is
   * written as the lease's checkpoint (docs/contract.md §8).
   */
  async release(name: string, holder: string, fencingToken: number, opts: ReleaseOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = { holder, fencingToken };
    if (opts.checkpoint !== undefined) body["checkpoint"] = opts.checkpoint;
    return parseLease(await this.#call("release", name, "POST", leasePath(name, ":release"), body, opts));
  }

  /**
   * Hands the holding named by holder and token over to req.to
   * (docs/contract.md §8): the holding ends now, as with release, the
   * checkpoint (if given) is written, and the lease is reserved for req.to
   * for reserveMs (default 5,000), so that req.to's acquire gets token + 1
   * and the checkpoint while anyone else's is refused with
   * LeaseReservedError. Repeating it succeeds while nobody has acquired
   * since. Not the current live holding: LeaseLostError.
   */
  async transfer(name: string, req: TransferRequest, opts: CallOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = { holder: req.holder, fencingToken: req.fencingToken, to: req.to };
    if (req.checkpoint !== undefined) body["checkpoint"] = req.checkpoint;
    if (req.reserveMs !== undefined) body["reserveMs"] = Math.max(1, Math.round(req.reserveMs));
    if (req.toPrincipal !== undefined) body["toPrincipal"] = req.toPrincipal;
    return parseLease(await this.#call("transfer", name, "POST", leasePath(name, ":transfer"), body, opts));
  }

  /** Returns the lease, held or not; throws NotFoundError if it never existed. */
  async get(name: string, opts: CallOptions = {}): Promise<Lease> {
    return parseLease(await this.#call("get", name, "GET", leasePath(name, ""), undefined, opts));
  }

  /** Returns one page of leases in name order. */
  async list(req: ListRequest = {}, opts: CallOptions = {}): Promise<Page> {
    const q = new URLSearchParams();
    if (req.prefix) q.set("prefix", req.prefix);
    if (req.pageSize) q.set("pageSize", String(req.pageSize));
    if (req.pageToken) q.set("pageToken", req.pageToken);
    const qs = q.toString();
    const raw = (await this.#call("list", req.prefix ?? "", "GET", "/v1/leases" + (qs ? "?" + qs : ""), undefined, opts)) as
      | Record<string, unknown>
      | null;
    const leases = Array.isArray(raw?.["leases"]) ? (raw["leases"] as unknown[]).map(parseLease) : [];
    const next = raw?.["nextPageToken"];
    return { leases, nextPageToken: typeof next === "string" ? next : "" };
  }

  /** Iterates over every lease whose name starts with prefix, page after page (1,000 a page). */
  async *all(prefix = "", opts: CallOptions = {}): AsyncGenerator<Lease, void, undefined> {
    let pageToken = "";
    for (;;) {
      const page = await this.list({ prefix, pageSize: 1000, pageToken }, opts);
      yield* page.leases;
      if (page.nextPageToken === "") return;
      pageToken = page.nextPageToken;
    }
  }

  /**
   * Ends the live holding of the lease now, as an operator (the admin verb):
   * the holder's next renew is lease_lost, the next acquire gets token + 1.
   * A lease that is not held is answered unchanged.
   *
   * Unlike the other calls a revoke is not idempotent (sent again after its
   * answer was lost it could end a newer holding), so it retries only
   * failures that show the service did not act: 429, and connections that
   * could not be made. Give fencingToken to revoke only a holding you have
   * seen.
   */
  async revoke(name: string, req: RevokeRequest, opts: CallOptions = {}): Promise<Lease> {
    const body: Record<string, unknown> = { reason: req.reason };
    if (req.fencingToken !== undefined && req.fencingToken > 0) body["fencingToken"] = req.fencingToken;
    return parseLease(await this.#call("revoke", name, "POST", leasePath(name, ":revoke"), body, opts, { notIdempotent: true }));
  }

  /**
   * Deletes a lease that nobody holds or has reserved (DELETE
   * /v1/leases/{name}, docs/contract.md §15) and returns it as it was. It is
   * then not found to get, list and watch, but its fencing token is kept:
   * the next acquire gets the deleted token + 1. A held lease throws
   * LeaseHeldError, a reserved one LeaseReservedError, a missing or already
   * deleted one NotFoundError. Needs the delete verb (or admin) with
   * authentication on. Not idempotent (sent again it is NotFoundError), so
   * it is retried only when the service did not act (429, no connection).
   */
  async delete(name: string, opts: CallOptions = {}): Promise<Lease> {
    return parseLease(await this.#call("delete", name, "DELETE", leasePath(name, ""), undefined, opts, { notIdempotent: true }));
  }

  /**
   * Watches one lease (GET /v1/leases/{name}:watch): the lease now (a
   * "lease" event), then each change of holding. The first connection is
   * retried like any call and its failure is thrown; after it, a dropped
   * stream (or one silent for idleTimeoutMs) is reconnected with capped,
   * jittered backoff for as long as the signal lives, sending Last-Event-ID
   * with the last id seen. The first event after a reconnect is a "lease"
   * event with the lease as it is then, so changes missed meanwhile are
   * summed up, not lost; events can repeat across a reconnect (see
   * isNewer). A refusal that retrying cannot cure (a bad name, denied
   * credentials) is thrown. Aborting the signal, or leaving the loop, ends
   * the stream.
   */
  async *watch(name: string, opts: WatchOptions = {}): AsyncGenerator<LeaseEvent, void, undefined> {
    const signal = opts.signal;
    const idleMs = opts.idleTimeoutMs ?? defaultIdleTimeoutMs;
    let lastId = opts.lastEventId ?? "";
    let connected = false;
    let failures = 0;
    while (!signal?.aborted) {
      const ac = new AbortController();
      const onAbort = (): void => ac.abort(signal?.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      try {
        let body: ReadableStream<Uint8Array>;
        try {
          body = await this.#openStream(name, ac, lastId);
        } catch (err) {
          if (signal?.aborted) return;
          if (!(err instanceof UnavailableError)) throw err;
          if (!connected && failures + 1 >= this.maxAttempts) throw err;
          if (!(await sleep(backoffDelay(this.backoff, failures), signal))) return;
          failures++;
          continue;
        }
        connected = true;
        for await (const ev of readEvents(body, ac, idleMs)) {
          if (ev.id !== "") lastId = ev.id;
          failures = 0;
          yield ev;
        }
      } finally {
        signal?.removeEventListener("abort", onAbort);
        ac.abort();
      }
      if (signal?.aborted) return;
      // The stream ended or dropped: reconnect, spaced like retries.
      if (!(await sleep(backoffDelay(this.backoff, failures), signal))) return;
      failures++;
    }
  }

  /** Sends one watch request; resolves to the body once the headers said 200 within the request timeout. */
  async #openStream(name: string, ac: AbortController, lastId: string): Promise<ReadableStream<Uint8Array>> {
    const timer = setTimeout(() => ac.abort(new AttemptTimeout(this.requestTimeoutMs)), this.requestTimeoutMs);
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream", "User-Agent": this.#userAgent };
      if (lastId !== "") headers["Last-Event-ID"] = lastId;
      await this.#authorize(headers, ac.signal, "watch", name);
      let res: Response;
      try {
        res = await this.#fetch(this.baseUrl + leasePath(name, ":watch"), { headers, signal: ac.signal });
      } catch (err) {
        throw transportError("watch", name, ac.signal.reason ?? err);
      }
      if (res.status !== 200 || res.body === null) {
        const text = await readAnswer(res, "watch", name).catch(() => "");
        throw problemError("watch", name, res, text);
      }
      return res.body;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Opens a session (docs/contract.md §14): a WebSocket to
   * GET /v1/sessions:connect that heartbeats every windowMs / 4 and through
   * which leases are held until its heartbeats stop. Resolves once the
   * first heartbeat is acknowledged. Throws SessionsUnsupportedError when
   * the service has no sessions (404, 405 or 501 on the route, or no
   * WebSocket in this runtime: on Node 20 install the ws package), and the
   * service's refusal otherwise (a window out of 200 … 60,000 ms,
   * credentials, limits). The Elector uses a shared one by default.
   */
  openSession(opts: SessionOptions = {}): Promise<Session> {
    const deps = {
      baseUrl: this.baseUrl,
      headers: async (signal: AbortSignal): Promise<Record<string, string>> => {
        const h: Record<string, string> = { "User-Agent": this.#userAgent };
        await this.#authorize(h, signal, "session", "");
        return h;
      },
      requestTimeoutMs: this.requestTimeoutMs,
      fetch: this.#fetch,
    };
    return Session.open(deps, opts);
  }

  /** Sends a request, retrying transient failures, and returns the parsed JSON of its 200 answer. */
  async #call(op: string, name: string, method: string, path: string, body: unknown, opts: CallOptions, plan: CallPlan = {}): Promise<unknown> {
    const signal = opts.signal;
    const attempts = opts.maxAttempts ?? this.maxAttempts;
    const timeout = (opts.timeoutMs ?? this.requestTimeoutMs) + (plan.extraMs ?? 0);
    if (body !== null && typeof body === "object") checkSendable(`leasesvc ${op} "${name}"`, body as Record<string, unknown>);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    let last: LeaseError | undefined;
    for (let n = 0; ; n++) {
      signal?.throwIfAborted();
      try {
        return await this.#once(op, name, method, path, payload, timeout, signal);
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (!(err instanceof UnavailableError) || (plan.notIdempotent && !notActedOn(err))) throw err;
        last = err;
      }
      if (n + 1 >= attempts) break;
      let d = backoffDelay(this.backoff, n);
      if (last instanceof RateLimitedError && last.retryAfterMs > d) {
        d = last.retryAfterMs; // the caller's rate limit: sooner is refused again
      } else if (last.retryAfterMs > d) {
        d = Math.min(last.retryAfterMs, this.backoff.maxMs);
      }
      if (!(await sleep(d, signal))) throw signal?.reason;
    }
    throw last;
  }

  /** Sends one attempt. */
  async #once(op: string, name: string, method: string, path: string, payload: string | undefined, timeoutMs: number, signal?: AbortSignal): Promise<unknown> {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(new AttemptTimeout(timeoutMs)), timeoutMs);
    const onAbort = (): void => ac.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const headers: Record<string, string> = { Accept: "application/json", "User-Agent": this.#userAgent };
      if (payload !== undefined) headers["Content-Type"] = "application/json";
      await this.#authorize(headers, ac.signal, op, name);
      let res: Response;
      let text: string;
      try {
        const init: RequestInit = { method, headers, signal: ac.signal };
        if (payload !== undefined) init.body = payload;
        res = await this.#fetch(this.baseUrl + path, init);
        text = await readAnswer(res, op, name);
      } catch (err) {
        if (err instanceof InternalError) throw err;
        throw transportError(op, name, ac.signal.aborted ? ac.signal.reason : err);
      }
      if (res.status === 200) {
        let v: unknown;
        try {
          v = JSON.parse(text) as unknown;
        } catch (err) {
          throw new InternalError(`leasesvc ${op} "${name}": decode answer: ${String(err)}`, { status: 200, cause: err });
        }
        const bad = unsafeOrdering(v);
        if (bad !== "") throw new InternalError(`leasesvc ${op} "${name}": ${protocolText(bad)}`, { status: 200 });
        return v;
      }
      throw problemError(op, name, res, text);
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Sets the credential headers, if any; throws CredentialsError when the provider gives no token in time. */
  async #authorize(headers: Record<string, string>, signal: AbortSignal, op: string, name: string): Promise<void> {
    const provider = this.#token;
    if (provider === undefined || provider === "") return;
    let tok: string;
    try {
      tok = typeof provider === "string" ? provider : await abortable(Promise.resolve().then(provider), signal);
    } catch (err) {
      throw new CredentialsError(`leasesvc ${op} "${name}": no credentials: ${errorText(err)}`, { cause: err });
    }
    if (typeof tok !== "string" || tok === "") {
      throw new CredentialsError(`leasesvc ${op} "${name}": no credentials: the token provider gave an empty token`);
    }
    headers["Authorization"] = "Bearer " + tok;
    headers["X-Serverless-Authorization"] = "Bearer " + tok;
  }
}

/** leasePath is the path of a lease with a custom method such as ":renew". */
function leasePath(name: string, method: string): string {
  return "/v1/leases/" + encodeURIComponent(name) + method;
}

/** abortable settles as p does, or rejects with the signal's reason when it is aborted first. */
function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(e as Error);
      },
    );
  });
}

/** transportError is the UnavailableError of an exchange that got no answer. */
function transportError(op: string, name: string, err: unknown): UnavailableError {
  let text = errorText(err);
  const cause = err instanceof Error ? (err.cause as { code?: unknown } | undefined) : undefined;
  if (cause && typeof cause === "object" && "message" in cause) text += ": " + String((cause as Error).message);
  return new UnavailableError(`leasesvc ${op} "${name}": unavailable: ${text}`, { cause: err });
}

/** notActedOn reports whether a transient failure shows that the service did not act: a rate-limit refusal, or a connection never made. */
function notActedOn(e: UnavailableError): boolean {
  if (e instanceof RateLimitedError) return true;
  if (e.status !== 0) return false;
  const cause = e.cause instanceof Error ? (e.cause.cause as { code?: unknown } | undefined) : undefined;
  return cause?.code === "ECONNREFUSED";
}

/** problemError turns an error answer (an RFC 9457 problem, or not) into a LeaseError. */
function problemError(op: string, name: string, res: Response, text: string): LeaseError {
  let p: Record<string, unknown> = {};
  try {
    const v: unknown = JSON.parse(text);
    if (v !== null && typeof v === "object") p = v as Record<string, unknown>;
  } catch {
    // Not a problem document: the status decides.
  }
  let retryAfterMs = 0;
  const ra = res.headers.get("Retry-After");
  if (ra !== null && /^\d+$/.test(ra.trim()) && Number(ra) > 0) retryAfterMs = Number(ra) * 1000;
  const code = typeof p["code"] === "string" ? p["code"] : "";
  let detail = typeof p["detail"] === "string" ? p["detail"] : "";
  if (code === "lease_held" && p["lease"] !== null && typeof p["lease"] === "object") {
    return new LeaseHeldError(parseLease(p["lease"]), { status: res.status, detail, retryAfterMs });
  }
  if (code === "lease_reserved" && p["lease"] !== null && typeof p["lease"] === "object") {
    const l = parseLease(p["lease"]);
    const who = typeof p["reservedFor"] === "string" && p["reservedFor"] !== "" ? p["reservedFor"] : l.reservedFor;
    return new LeaseReservedError(l, who, parseTime(p["reservedUntil"]) ?? l.reservedUntil, { status: res.status, detail, retryAfterMs });
  }
  if (code === "" && detail === "") detail = text.slice(0, 200).trim();
  const fields: FieldError[] = Array.isArray(p["errors"])
    ? (p["errors"] as unknown[]).map((f) => {
        const o = (f ?? {}) as Record<string, unknown>;
        return { field: String(o["field"] ?? ""), detail: String(o["detail"] ?? "") };
      })
    : [];
  const Cls = errorClassOf(res.status, code);
  let msg = `leasesvc ${op} "${name}": ${code || res.status} (${res.status})`;
  if (detail) msg += ": " + detail;
  for (const f of fields) msg += `; ${f.field}: ${f.detail}`;
  return new Cls(msg, { status: res.status, code: code || undefined, detail, fields, retryAfterMs });
}
