/**
 * The WebSocket under a session (docs/contract.md §14): the runtime's own
 * globalThis.WebSocket where it has one, else the `ws` package (an
 * optional peer dependency, loaded on first use). Node 20 has no global
 * WebSocket: install `ws` there.
 */
import { errorClassOf, InvalidArgumentError, LeaseError, UnavailableError } from "./errors.js";
import { SessionLimitError } from "./sessiontypes.js";

/**
 * The subprotocol of sessions: v2, whose resumes carry the epoch the agent
 * proposes (docs/contract.md §14, Old clients: a v1 resume is refused).
 */
export const sessionProtocol = "leasesvc.session.v2";

/** One open socket, as a session uses it: text messages in and out, and its end. */
export interface Wire {
  /** Sends one text message; a closed socket drops it (its close is reported through onClose). */
  send(text: string): void;
  /** Closes the socket with code (1000 by default). */
  close(code?: number): void;
  /** Called with each text message. */
  onMessage: (text: string) => void;
  /** Called once when the socket is closed, by either side or by a failure. */
  onClose: (code: number, reason: string) => void;
}

/**
 * Thrown by Client.openSession (and the Elector's default session) when the
 * service does not offer sessions: the upgrade was answered 404, 405 or 501.
 * The Elector then holds its lease with plain renewals.
 */
export class SessionsUnsupportedError extends LeaseError {
  static override readonly defaultCode: string = "sessions_unsupported";
}

/** What dial needs to know. */
export interface DialOptions {
  /** The service's base URL (http or https). */
  baseUrl: string;
  /** The request headers of the upgrade (credentials, User-Agent). */
  headers: Record<string, string>;
  /** Bounds the handshake. */
  timeoutMs: number;
  /** The fetch that probes why a global WebSocket could not connect. */
  fetch: typeof fetch;
}

/** The path of the sessions route. */
export const sessionPath = "/v1/sessions:connect";

/** wsURL turns the service's base URL into the WebSocket URL of the sessions route. */
export function wsURL(baseUrl: string): string {
  return baseUrl.replace(/^http/, "ws") + sessionPath;
}

/** unsupportedStatus reports whether an upgrade answered with status means a service without sessions. */
export function unsupportedStatus(status: number): boolean {
  return status === 404 || status === 405 || status === 501;
}

/** refusal turns a refused upgrade (status and body) into the error to throw. */
export function refusal(status: number, body: string, retryAfter: string | null): LeaseError {
  if (unsupportedStatus(status)) {
    return new SessionsUnsupportedError(`leasesvc session: the service does not offer sessions (${status} on GET ${sessionPath})`, { status });
  }
  let p: Record<string, unknown> = {};
  try {
    const v: unknown = JSON.parse(body);
    if (v !== null && typeof v === "object") p = v as Record<string, unknown>;
  } catch {
    // Not a problem document: the status decides.
  }
  const code = typeof p["code"] === "string" ? p["code"] : "";
  const detail = typeof p["detail"] === "string" ? p["detail"] : body.slice(0, 200).trim();
  let retryAfterMs = 0;
  if (retryAfter !== null && /^\d+$/.test(retryAfter.trim())) retryAfterMs = Number(retryAfter) * 1000;
  // A 429 at the service's cap of sessions (limit "sessions",
  // docs/contract.md §14 Limits) is not the caller's rate limit.
  const Cls = status === 429 && p["limit"] === "sessions" ? SessionLimitError : errorClassOf(status, code);
  return new Cls(`leasesvc session: connect: ${code || status} (${status})${detail ? ": " + detail : ""}`, { status, code: code || undefined, detail, retryAfterMs });
}

/** A WebSocket as the `ws` package and the WHATWG API both offer it, reduced to what dial uses. */
interface GlobalSocket {
  readonly protocol: string;
  send(data: string): void;
  close(code?: number): void;
  addEventListener(type: string, fn: (ev: { data?: unknown; code?: number; reason?: string }) => void): void;
}
type GlobalCtor = new (url: string, init?: unknown) => GlobalSocket;

/** The parts of ws's WebSocket that dial uses. */
interface WsSocket {
  readonly protocol: string;
  send(data: string): void;
  close(code?: number): void;
  terminate(): void;
  on(event: string, fn: (...args: never[]) => void): void;
}
type WsCtor = new (url: string, protocols: string[], opts: Record<string, unknown>) => WsSocket;

let wsCtor: Promise<WsCtor | undefined> | undefined;

/** loadWs imports the optional `ws` package once; undefined when it is not installed. */
function loadWs(): Promise<WsCtor | undefined> {
  const spec = "ws"; // a variable, so that no types are needed and bundlers leave it alone
  wsCtor ??= import(spec).then(
    (m: { WebSocket?: WsCtor; default?: WsCtor }) => m.WebSocket ?? m.default,
    () => undefined,
  );
  return wsCtor;
}

/**
 * dial opens a WebSocket to the sessions route, offering the sessions
 * subprotocol. A refused upgrade throws what refusal makes of it
 * (SessionsUnsupportedError on 404, 405, 501); no answer in time or a
 * failed connection throws UnavailableError.
 */
export async function dial(o: DialOptions): Promise<Wire> {
  const G = (globalThis as { WebSocket?: GlobalCtor }).WebSocket;
  if (typeof G === "function") return dialGlobal(G, o);
  const W = await loadWs();
  if (W === undefined) {
    throw new SessionsUnsupportedError("leasesvc session: this runtime has no WebSocket: install the ws package (npm install ws) to hold leases through sessions");
  }
  return dialWs(W, o);
}

function dialWs(W: WsCtor, o: DialOptions): Promise<Wire> {
  return new Promise<Wire>((resolve, reject) => {
    let settled = false;
    const ws = new W(wsURL(o.baseUrl), [sessionProtocol], { headers: o.headers, handshakeTimeout: o.timeoutMs, perMessageDeflate: false });
    const wire: Wire = {
      send: (text) => {
        try {
          ws.send(text);
        } catch {
          // closing: onClose reports it
        }
      },
      close: (code = 1000) => {
        try {
          ws.close(code);
        } catch {
          ws.terminate();
        }
      },
      onMessage: () => {},
      onClose: () => {},
    };
    const fail = (err: LeaseError): void => {
      if (settled) return;
      settled = true;
      reject(err);
    };
    ws.on("unexpected-response", ((req: { destroy(): void }, res: { statusCode?: number; headers: Record<string, string | string[] | undefined>; on(ev: string, fn: (chunk?: unknown) => void): void; resume(): void }) => {
      let body = "";
      res.on("data", (c) => {
        if (body.length < 4096) body += String(c);
      });
      res.on("end", () => {
        const ra = res.headers["retry-after"];
        fail(refusal(res.statusCode ?? 0, body, typeof ra === "string" ? ra : null));
        req.destroy();
      });
      res.on("error", () => fail(refusal(res.statusCode ?? 0, body, null)));
    }) as (...args: never[]) => void);
    ws.on("open", (() => {
      if (ws.protocol !== sessionProtocol) {
        fail(new InvalidArgumentError(`leasesvc session: the service chose the subprotocol ${JSON.stringify(ws.protocol)}, not ${sessionProtocol}`));
        ws.terminate();
        return;
      }
      settled = true;
      resolve(wire);
    }) as (...args: never[]) => void);
    ws.on("message", ((data: unknown, isBinary: boolean) => {
      if (!isBinary) wire.onMessage(String(data));
    }) as (...args: never[]) => void);
    ws.on("error", ((err: Error) => {
      fail(new UnavailableError(`leasesvc session: connect: unavailable: ${err.message}`, { cause: err }));
    }) as (...args: never[]) => void);
    ws.on("close", ((code: number, reason: Buffer) => {
      fail(new UnavailableError(`leasesvc session: connect: the socket closed (${code})`));
      wire.onClose(code, String(reason));
    }) as (...args: never[]) => void);
  });
}

function dialGlobal(G: GlobalCtor, o: DialOptions): Promise<Wire> {
  return new Promise<Wire>((resolve, reject) => {
    let settled = false;
    let opened = false;
    // The non-standard init object (protocols and headers) is what Node's,
    // Deno's and Bun's WebSocket take to send credentials with the upgrade.
    const ws = new G(wsURL(o.baseUrl), { protocols: [sessionProtocol], headers: o.headers });
    const timer = setTimeout(() => {
      fail(new UnavailableError(`leasesvc session: connect: no answer within ${o.timeoutMs} ms`));
      ws.close();
    }, o.timeoutMs);
    const wire: Wire = {
      send: (text) => {
        try {
          ws.send(text);
        } catch {
          // closing: onClose reports it
        }
      },
      close: (code = 1000) => ws.close(code),
      onMessage: () => {},
      onClose: () => {},
    };
    const fail = (err: LeaseError): void => {
      clearTimeout(timer);
      if (settled) return;
      settled = true;
      reject(err);
    };
    ws.addEventListener("open", () => {
      clearTimeout(timer);
      opened = true;
      settled = true;
      resolve(wire);
    });
    // A failure is followed by close, which reports it.
    ws.addEventListener("error", () => {});
    ws.addEventListener("message", (ev) => {
      if (typeof ev.data === "string") wire.onMessage(ev.data);
    });
    ws.addEventListener("close", (ev) => {
      if (!opened) {
        // The API hides a refused upgrade's status: ask the route with a
        // plain GET, which a service without sessions answers 404 too.
        void probe(o).then(fail, fail);
        return;
      }
      wire.onClose(ev.code ?? 1006, ev.reason ?? "");
    });
  });
}

/** probe explains a failed upgrade: the error its route's plain GET answers. */
async function probe(o: DialOptions): Promise<LeaseError> {
  try {
    const res = await o.fetch(o.baseUrl + sessionPath, { headers: o.headers, signal: AbortSignal.timeout(o.timeoutMs) });
    const text = await res.text();
    if (res.status === 401 || res.status === 403 || res.status === 429 || res.status >= 500 || unsupportedStatus(res.status)) {
      return refusal(res.status, text, res.headers.get("Retry-After"));
    }
    return new UnavailableError(`leasesvc session: connect: the upgrade failed (GET answers ${res.status})`, { status: 0 });
  } catch (err) {
    return new UnavailableError(`leasesvc session: connect: unavailable: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}
