/**
 * A stand-in of the sessions route (docs/contract.md §14) built on ws's
 * WebSocketServer, for unit tests: sessions and their leases on Maps, every
 * message recorded with its socket, acks, drops, moves and pushes on
 * demand. It speaks leasesvc.session.v2 as the service does: a resume
 * proposes an epoch, which takes the session only above its epoch (S1),
 * else 409 session_conflict; a v1 resume is refused.
 */
import { type IncomingMessage, type Server, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { performance } from "node:perf_hooks";
import { type WebSocket, WebSocketServer } from "ws";

/** A message the fake received, with the number of the socket it came on (1, 2, … in connection order) and performance.now() when it did. */
export interface Received {
  sock: number;
  msg: Record<string, unknown>;
  at: number;
}

interface FakeSession {
  id: string;
  epoch: number;
  windowMs: number;
  sock: number;
}

interface Holding {
  holder: string;
  token: number;
  session: string;
  checkpoint: Record<string, unknown> | null;
  /** A preempting candidate asking this holding to step down (shown as yieldRequested). */
  yieldTo?: string;
}

/** How the fake answers heartbeats: ack them, ignore them, or keep them for ackHeld. */
export type AckMode = "ack" | "none" | "hold";

export class FakeSessionServer {
  readonly server: Server;
  readonly wss: WebSocketServer;
  url = "";
  /** Every message received, in order. */
  readonly received: Received[] = [];
  /** Sockets by number. */
  readonly sockets = new Map<number, WebSocket>();
  /** When each socket closed (performance order): the index into received at that moment. */
  readonly closedAt = new Map<number, number>();
  /** The upgrade requests' headers, in order. */
  readonly upgrades: IncomingMessage["headers"][] = [];
  readonly sessions = new Map<string, FakeSession>();
  readonly leases = new Map<string, Holding>();
  ack: AckMode = "ack";
  /** Heartbeat ids kept while ack is "hold", with their socket. */
  readonly held: Array<{ sock: number; id: number }> = [];
  /** Answers the next upgrades with this status instead of switching protocols (0: none). */
  refuseStatus = 0;
  /** Answers open with this problem status (429: resource_exhausted, as at the service's session limits) and closes the socket with 1008 (0: none). */
  refuseOpen = 0;
  /** Message types recorded but not acted on until answerDeferred (a resume kept here is never answered unless it is). */
  readonly defer = new Set<string>();
  /** The messages kept by defer, with their socket, in order. */
  readonly deferred: Array<{ sock: number; type: string; run(): void }> = [];
  /** Answers resume with this problem status and closes the socket with 1008, changing nothing (0: none). */
  refuseResume = 0;
  /** Sockets on which the session ended (moved, say) while requests were under way: their lease operations are answered 503 unavailable, and the socket then closes with 1000. */
  readonly unavailableOn = new Set<number>();
  /** Answers release and transfer with this problem status (400 invalid_argument, 403 permission_denied, 429 resource_exhausted), changing nothing (0: none). */
  refuseLetGo = 0;
  /** The epochs of the resumes answered 409 session_conflict, in order. */
  readonly conflicts: number[] = [];
  /** The session lease TTL that opened and resumed carry (leaseTtlMs), ms. */
  leaseTtlMs = 30000;
  /** When not 0, the epoch opened carries (instead of 1): a service out of bounds. */
  openedEpoch = 0;
  #n = 0;
  #seq = 0;

  constructor() {
    this.server = createServer((_req, res) => {
      res.writeHead(404, { "Content-Type": "application/problem+json" });
      res.end(JSON.stringify({ type: "about:blank", title: "not found", status: 404, code: "not_found" }));
    });
    this.wss = new WebSocketServer({
      noServer: true,
      handleProtocols: (protocols) => (protocols.has("leasesvc.session.v2") ? "leasesvc.session.v2" : protocols.has("leasesvc.session.v1") ? "leasesvc.session.v1" : false),
    });
    this.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      this.upgrades.push(req.headers);
      if (this.refuseStatus !== 0 || !(req.url ?? "").startsWith("/v1/sessions:connect")) {
        const status = this.refuseStatus || 404;
        const body = JSON.stringify({ type: "about:blank", title: "refused", status, code: status === 404 ? "not_found" : "unavailable" });
        socket.end(`HTTP/1.1 ${status} Refused\r\nContent-Type: application/problem+json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.#accept(ws));
    });
  }

  static async start(): Promise<FakeSessionServer> {
    const f = new FakeSessionServer();
    await new Promise<void>((r) => f.server.listen(0, "127.0.0.1", r));
    f.url = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
    return f;
  }

  async close(): Promise<void> {
    for (const ws of this.sockets.values()) ws.terminate();
    this.wss.close();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** The messages of type received (on socket sock, when given). */
  of(type: string, sock?: number): Received[] {
    return this.received.filter((r) => r.msg["type"] === type && (sock === undefined || r.sock === sock));
  }

  /** The number of the latest socket. */
  get lastSock(): number {
    return this.#n;
  }

  /** Closes every open socket abruptly (no close frame): the network dropped. */
  drop(): void {
    for (const ws of this.sockets.values()) ws.terminate();
  }

  /** Closes socket sock abruptly. */
  dropSock(sock: number): void {
    this.sockets.get(sock)?.terminate();
  }

  /** Sends msg to socket sock (default: the latest). */
  push(msg: Record<string, unknown>, sock = this.#n): void {
    this.sockets.get(sock)?.send(JSON.stringify(msg));
  }

  /** Acknowledges the held heartbeats with these ids (all, by default), in the order given. */
  ackHeld(ids?: number[]): void {
    const pick = ids ?? this.held.map((h) => h.id);
    for (const id of pick) {
      const i = this.held.findIndex((h) => h.id === id);
      if (i < 0) continue;
      const h = this.held.splice(i, 1)[0]!;
      this.push({ type: "ack", re: h.id }, h.sock);
    }
  }

  /** Acts on the deferred messages of type (on socket sock, when given), in order, as if they had just arrived. */
  answerDeferred(type: string, sock?: number): void {
    for (const d of this.deferred.filter((x) => x.type === type && (sock === undefined || x.sock === sock))) {
      this.deferred.splice(this.deferred.indexOf(d), 1);
      d.run();
    }
  }

  /** Forgets every session (as the service does when one expired): resumes get 404 session_not_found. */
  forgetSessions(): void {
    this.sessions.clear();
  }

  leaseJSON(name: string): Record<string, unknown> {
    const h = this.leases.get(name);
    const now = new Date().toISOString();
    return {
      name,
      holder: h?.holder ?? "",
      fencingToken: h?.token ?? 0,
      ttlMs: 30000,
      acquireTime: now,
      renewTime: now,
      expireTime: now,
      held: h !== undefined && h.session !== "",
      remainingMs: 30000,
      serverTime: now,
      transitions: h?.token ?? 0,
      metadata: {},
      checkpoint: h?.checkpoint ?? null,
      yieldRequested: h?.yieldTo !== undefined,
      yieldTo: h?.yieldTo ?? "",
      session: h !== undefined && h.session !== "",
      sessionWindowMs: h !== undefined && h.session !== "" ? (this.sessions.get(h.session)?.windowMs ?? 0) : undefined,
    };
  }

  #accept(ws: WebSocket): void {
    const sock = ++this.#n;
    this.sockets.set(sock, ws);
    let session: FakeSession | undefined;
    const send = (m: Record<string, unknown>): void => ws.send(JSON.stringify(m));
    const problem = (re: number | undefined, status: number, code: string, extra: Record<string, unknown> = {}): void =>
      send({ type: "error", ...(re === undefined ? {} : { re }), problem: { type: "about:blank", title: code, status, code, detail: code.replace(/_/g, " "), ...extra } });
    ws.on("close", () => {
      this.sockets.delete(sock);
      this.closedAt.set(sock, this.received.length);
    });
    ws.on("message", (data, isBinary) => {
      if (isBinary) {
        ws.close(1003);
        return;
      }
      const msg = JSON.parse(String(data)) as Record<string, unknown>;
      this.received.push({ sock, msg, at: performance.now() });
      const type = String(msg["type"]);
      if (this.defer.has(type)) this.deferred.push({ sock, type, run: () => handle(msg) });
      else handle(msg);
    });
    const handle = (msg: Record<string, unknown>): void => {
      const id = msg["id"] as number;
      const name = String(msg["name"] ?? "");
      switch (msg["type"]) {
        case "open": {
          const windowMs = (msg["windowMs"] as number | undefined) ?? 1000;
          if (windowMs < 200 || windowMs > 60000) {
            problem(id, 400, "invalid_argument");
            ws.close(1008);
            return;
          }
          if (this.refuseOpen !== 0) {
            problem(id, this.refuseOpen, this.refuseOpen === 429 ? "resource_exhausted" : "unavailable");
            ws.close(1008);
            return;
          }
          session = { id: `s${++this.#seq}`.padEnd(43, "x"), epoch: 1, windowMs, sock };
          this.sessions.set(session.id, session);
          send({ type: "opened", re: id, sessionId: session.id, epoch: this.openedEpoch || 1, windowMs, heartbeatMs: windowMs / 4, leaseTtlMs: this.leaseTtlMs });
          return;
        }
        case "resume": {
          const s = this.sessions.get(String(msg["sessionId"]));
          const epoch = msg["epoch"];
          if (ws.protocol !== "leasesvc.session.v2" || typeof epoch !== "number" || !Number.isInteger(epoch) || epoch < 1) {
            problem(id, 400, "invalid_argument", { fields: [{ field: "epoch", detail: "required: resumes are ordered by the agent; speak leasesvc.session.v2" }] });
            ws.close(1008);
            return;
          }
          if (s === undefined || this.refuseResume !== 0) {
            problem(id, s === undefined ? 404 : this.refuseResume, s === undefined ? "session_not_found" : "unavailable");
            ws.close(1008);
            return;
          }
          if (epoch <= s.epoch) {
            this.conflicts.push(epoch);
            problem(id, 409, "session_conflict", { epoch: s.epoch });
            ws.close(1008);
            return;
          }
          s.epoch = epoch;
          s.sock = sock;
          session = s;
          const leases: Record<string, unknown>[] = [];
          const lost: Record<string, unknown>[] = [];
          for (const l of (msg["leases"] as Array<{ name: string; holder: string; fencingToken: number }>) ?? []) {
            const h = this.leases.get(l.name);
            if (h && h.session === s.id && h.holder === l.holder && h.token === l.fencingToken) leases.push(this.leaseJSON(l.name));
            else lost.push({ name: l.name, fencingToken: l.fencingToken, reason: "taken" });
          }
          send({ type: "resumed", re: id, sessionId: s.id, epoch: s.epoch, windowMs: s.windowMs, heartbeatMs: s.windowMs / 4, leaseTtlMs: this.leaseTtlMs, leases, lost });
          return;
        }
        case "heartbeat":
          if (session === undefined || session.sock !== sock) return;
          if (this.ack === "ack") send({ type: "ack", re: id });
          else if (this.ack === "hold") this.held.push({ sock, id });
          return;
        case "acquire": {
          const h = this.leases.get(name);
          if (h && h.session !== "" && !(h.holder === msg["holder"] && h.session === session?.id)) {
            problem(id, 409, "lease_held", { lease: this.leaseJSON(name) });
            return;
          }
          if (!h || h.session === "") this.leases.set(name, { holder: String(msg["holder"]), token: (h?.token ?? 0) + 1, session: session!.id, checkpoint: h?.checkpoint ?? null });
          send({ type: "result", re: id, lease: this.leaseJSON(name) });
          return;
        }
        case "renew":
        case "release":
        case "transfer": {
          if (this.unavailableOn.has(sock)) {
            problem(id, 503, "unavailable");
            ws.close(1000);
            return;
          }
          if (this.refuseLetGo !== 0 && msg["type"] !== "renew") {
            problem(id, this.refuseLetGo, { 400: "invalid_argument", 403: "permission_denied", 429: "resource_exhausted" }[this.refuseLetGo] ?? "invalid_argument");
            return;
          }
          const h = this.leases.get(name);
          if (!h || h.session !== session?.id || h.holder !== msg["holder"] || h.token !== msg["fencingToken"]) {
            problem(id, 409, "lease_lost");
            return;
          }
          if (msg["checkpoint"] !== undefined) h.checkpoint = msg["checkpoint"] as Record<string, unknown>;
          if (msg["type"] !== "renew") h.session = "";
          send({ type: "result", re: id, lease: this.leaseJSON(name) });
          return;
        }
        case "close":
          for (const h of this.leases.values()) if (h.session === session?.id) h.session = "";
          if (session) this.sessions.delete(session.id);
          send({ type: "closed", re: id });
          ws.close(1000);
          return;
        default:
          problem(undefined, 400, "invalid_argument", { code: "session_protocol" });
          ws.close(1008);
      }
    };
  }

  /** Ends the holding of name as the service would on a REST release or revoke, pushing type ("lost" or "revoked") to its session's socket. */
  end(name: string, push: Record<string, unknown>): void {
    const h = this.leases.get(name);
    if (!h || h.session === "") return;
    const s = this.sessions.get(h.session);
    h.session = "";
    if (s) this.push({ name, fencingToken: h.token, ...push }, s.sock);
  }
}
