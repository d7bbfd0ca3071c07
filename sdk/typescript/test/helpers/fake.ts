/**
 * An in-process stand-in of the lease API (node:http) for unit tests: the
 * rules of docs/contract.md §3 on a Map, faults on demand, every request
 * recorded.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";

/** How the fake answers lease operations. */
export type Fault = "none" | "unavailable" | "hang" | "drop" | "limited";

interface Holding {
  name: string;
  holder: string;
  token: number;
  ttlMs: number;
  acquireAt: number;
  renewAt: number;
  expireAt: number;
  transitions: number;
  metadata: Record<string, unknown>;
}

/** A request the fake saw. */
export interface Seen {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: Record<string, unknown>;
  /** performance.now() when it arrived. */
  at: number;
}

/** A scripted answer: the next matching request gets it instead of the normal one. */
export interface Scripted {
  /** Matches the path's suffix, such as ":acquire", or "*" for any. */
  match: string;
  status: number;
  code?: string;
  headers?: Record<string, string>;
  body?: Record<string, unknown>;
}

export class FakeService {
  readonly server: Server;
  url = "";
  fault: Fault = "none";
  readonly leases = new Map<string, Holding>();
  readonly seen: Seen[] = [];
  readonly script: Scripted[] = [];
  readonly lastEventIds: string[] = [];
  #watchers = new Map<string, Set<ServerResponse>>();
  #hung = new Set<ServerResponse>();

  constructor() {
    this.server = createServer((req, res) => void this.#handle(req, res));
  }

  static async start(): Promise<FakeService> {
    const f = new FakeService();
    await new Promise<void>((r) => f.server.listen(0, "127.0.0.1", r));
    f.url = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
    return f;
  }

  async close(): Promise<void> {
    for (const set of this.#watchers.values()) for (const w of set) w.destroy();
    for (const h of this.#hung) h.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** count returns how many requests ended with suffix (such as ":renew"). */
  count(suffix: string): number {
    return this.seen.filter((s) => s.path.split("?")[0]!.endsWith(suffix)).length;
  }

  /** revoke ends the live holding of name now, as an operator would. */
  revoke(name: string): void {
    const h = this.leases.get(name);
    if (h && h.expireAt > Date.now()) {
      h.expireAt = Date.now();
      this.#publish(h, "revoked");
    }
  }

  /** dropWatchers closes every open watch stream. */
  dropWatchers(): void {
    for (const set of this.#watchers.values()) for (const w of set) w.destroy();
  }

  #json(h: Holding): Record<string, unknown> {
    const now = Date.now();
    return {
      name: h.name,
      holder: h.holder,
      fencingToken: h.token,
      ttlMs: h.ttlMs,
      acquireTime: new Date(h.acquireAt).toISOString(),
      renewTime: new Date(h.renewAt).toISOString(),
      expireTime: new Date(h.expireAt).toISOString(),
      held: now < h.expireAt,
      remainingMs: Math.max(0, h.expireAt - now),
      serverTime: new Date(now).toISOString(),
      transitions: h.transitions,
      metadata: h.metadata,
    };
  }

  #send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    res.writeHead(status, { "Content-Type": status === 200 ? "application/json" : "application/problem+json", ...headers });
    res.end(JSON.stringify(body));
  }

  #problem(res: ServerResponse, status: number, code: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): void {
    this.#send(res, status, { type: "about:blank", title: code, status, code, detail: code.replace(/_/g, " "), ...extra }, headers);
  }

  #publish(h: Holding, type: string): void {
    const set = this.#watchers.get(h.name);
    if (!set) return;
    const data = JSON.stringify({ type, lease: this.#json(h), eventTime: new Date().toISOString() });
    for (const w of set) w.write(`id: ${h.name}/${h.token}/${type}\nevent: ${type}\ndata: ${data}\n\n`);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let raw = "";
    for await (const chunk of req) raw += String(chunk);
    let body: Record<string, unknown> = {};
    try {
      body = raw === "" ? {} : (JSON.parse(raw) as Record<string, unknown>);
    } catch {
      this.#problem(res, 400, "invalid_argument");
      return;
    }
    const path = req.url ?? "/";
    this.seen.push({ method: req.method ?? "", path, headers: req.headers, body, at: performance.now() });
    const i = this.script.findIndex((s) => s.match === "*" || path.split("?")[0]!.endsWith(s.match));
    if (i >= 0) {
      const s = this.script.splice(i, 1)[0]!;
      if (s.code) this.#problem(res, s.status, s.code, s.body, s.headers);
      else this.#send(res, s.status, s.body ?? {}, s.headers);
      return;
    }
    const m = /^\/v1\/leases\/([^/:?]+)(:[a-z]+)?$/.exec(path);
    const isWatch = m?.[2] === ":watch";
    if (!isWatch) {
      switch (this.fault) {
        case "unavailable":
          this.#problem(res, 503, "unavailable", {}, { "Retry-After": "1" });
          return;
        case "limited":
          this.#problem(res, 429, "resource_exhausted", {}, { "Retry-After": "1" });
          return;
        case "hang":
          this.#hung.add(res);
          res.on("close", () => this.#hung.delete(res));
          return;
        case "drop":
          req.socket.destroy();
          return;
      }
    }
    if (path.startsWith("/v1/leases?") || path === "/v1/leases") {
      this.#list(res, new URL(path, "http://x").searchParams);
      return;
    }
    if (!m) {
      this.#problem(res, 404, "not_found");
      return;
    }
    const name = decodeURIComponent(m[1]!);
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(name)) {
      this.#problem(res, 400, "invalid_argument", { errors: [{ field: "name", detail: "bad name" }] });
      return;
    }
    const h = this.leases.get(name);
    const now = Date.now();
    const live = h !== undefined && now < h.expireAt;
    switch (m[2] ?? "") {
      case "":
        if (!h) this.#problem(res, 404, "not_found");
        else this.#send(res, 200, this.#json(h));
        return;
      case ":watch":
        this.#watch(req, res, name);
        return;
      case ":acquire":
        await this.#acquire(res, name, body);
        return;
      case ":renew":
        if (!h || !live || h.holder !== body["holder"] || h.token !== body["fencingToken"]) {
          this.#problem(res, 409, "lease_lost");
          return;
        }
        if (typeof body["ttlMs"] === "number") h.ttlMs = body["ttlMs"];
        h.renewAt = now;
        h.expireAt = now + h.ttlMs;
        this.#send(res, 200, this.#json(h));
        return;
      case ":release":
        if (!h || h.holder !== body["holder"] || h.token !== body["fencingToken"]) {
          this.#problem(res, 409, "lease_lost");
          return;
        }
        if (live) {
          h.expireAt = now;
          this.#publish(h, "released");
        }
        this.#send(res, 200, this.#json(h));
        return;
      case ":revoke":
        if (!h) {
          this.#problem(res, 404, "not_found");
          return;
        }
        this.revoke(name);
        this.#send(res, 200, this.#json(h));
        return;
    }
    this.#problem(res, 404, "not_found");
  }

  async #acquire(res: ServerResponse, name: string, body: Record<string, unknown>): Promise<void> {
    const holder = String(body["holder"] ?? "");
    const ttlMs = Number(body["ttlMs"] ?? 0);
    if (holder === "" || !(ttlMs > 0)) {
      this.#problem(res, 400, "invalid_argument", { errors: [{ field: holder === "" ? "holder" : "ttlMs", detail: "required" }] });
      return;
    }
    const until = Date.now() + Number(body["waitMs"] ?? 0);
    let gone = false;
    res.on("close", () => (gone = true));
    for (;;) {
      const h = this.leases.get(name);
      const now = Date.now();
      if (!h || now >= h.expireAt) {
        const next: Holding = {
          name,
          holder,
          token: (h?.token ?? 0) + 1,
          ttlMs,
          acquireAt: now,
          renewAt: now,
          expireAt: now + ttlMs,
          transitions: (h?.transitions ?? 0) + 1,
          metadata: (body["metadata"] as Record<string, unknown> | undefined) ?? {},
        };
        this.leases.set(name, next);
        this.#publish(next, "acquired");
        this.#send(res, 200, this.#json(next));
        return;
      }
      if (h.holder === holder) {
        h.renewAt = now;
        h.expireAt = now + ttlMs;
        h.ttlMs = ttlMs;
        this.#send(res, 200, this.#json(h));
        return;
      }
      if (now >= until || gone) {
        if (!gone) this.#problem(res, 409, "lease_held", { lease: this.#json(h) }, { "Retry-After": String(Math.ceil((h.expireAt - now) / 1000)) });
        return;
      }
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  #list(res: ServerResponse, q: URLSearchParams): void {
    const prefix = q.get("prefix") ?? "";
    const size = Number(q.get("pageSize") ?? "100") || 100;
    const start = Number(q.get("pageToken") ?? "0") || 0;
    const all = [...this.leases.values()].filter((h) => h.name.startsWith(prefix)).sort((a, b) => (a.name < b.name ? -1 : 1));
    const page = all.slice(start, start + size);
    this.#send(res, 200, { leases: page.map((h) => this.#json(h)), nextPageToken: start + size < all.length ? String(start + size) : "" });
  }

  #watch(req: IncomingMessage, res: ServerResponse, name: string): void {
    const last = req.headers["last-event-id"];
    if (typeof last === "string") this.lastEventIds.push(last);
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    const h = this.leases.get(name);
    res.write(`event: lease\ndata: ${h ? JSON.stringify(this.#json(h)) : "null"}\n\n`);
    let set = this.#watchers.get(name);
    if (!set) this.#watchers.set(name, (set = new Set()));
    set.add(res);
    res.on("close", () => set.delete(res));
  }
}
