/**
 * Every reader bounded (issue 37, docs/contract.md §16): an answer or a
 * stream event larger than maxAnswerBytes fails with an error naming the
 * bound once about that many bytes are read. A fake service sends a valid
 * event or answer of more than the bound, so a reader without it accepts.
 */
import assert from "node:assert/strict";
import { type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Client, InternalError, maxAnswerBytes } from "../src/index.js";

const head = `{"type":"acquired","lease":{"name":"x","holder":"h","fencingToken":1,"held":true,"metadata":{"b":"`;
const tail = `"}},"eventTime":"2026-11-23T18:00:00Z"}`;
const chunk = Buffer.alloc(1 << 20, "x");

/** write sends n bytes of "x", then resolves false if the client went away. */
async function write(res: ServerResponse, n: number): Promise<boolean> {
  for (let left = n; left > 0; left -= chunk.length) {
    if (res.destroyed) return false;
    if (!res.write(left >= chunk.length ? chunk : chunk.subarray(0, left))) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          res.off("drain", done);
          res.off("close", done);
          resolve();
        };
        res.on("drain", done);
        res.on("close", done);
      });
    }
  }
  return !res.destroyed;
}

/** serve answers every request with body, closing the server at the end of the test. */
async function serve(t: { after: (fn: () => unknown) => void }, body: (res: ServerResponse, path: string) => Promise<void>): Promise<string> {
  const server = createServer((req, res) => void body(res, req.url ?? ""));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** counting is a fetch that counts the body bytes the client reads. */
function counting(): { fetch: typeof fetch; read: () => number } {
  let n = 0;
  const f: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (res.body === null) return res;
    const counted = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(c, ctl) {
          n += c.length;
          ctl.enqueue(c);
        },
      }),
      { signal: init?.signal ?? undefined },
    );
    return new Response(counted, { status: res.status, headers: res.headers });
  };
  return { fetch: f, read: () => n };
}

for (const [label, lines, size] of [
  ["one line", 1, 2 * maxAnswerBytes],
  ["many lines", 17, maxAnswerBytes + (4 << 20)],
] as const) {
  test(`a watch event larger than maxAnswerBytes (${label}) fails, saying so`, async (t) => {
    const url = await serve(t, async (res) => {
      res.writeHead(200, { "Content-Type": "text/event-stream" });
      res.write(": hello\n\nid: 1\nevent: acquired\ndata: " + head);
      for (let i = 0; i < lines; i++) {
        if (i > 0) res.write("\ndata: ");
        if (!(await write(res, Math.floor(size / lines)))) return;
      }
      res.end(tail + "\n\n");
    });
    const c = counting();
    const client = new Client(url, { fetch: c.fetch, maxAttempts: 1 });
    const ac = new AbortController();
    t.after(() => ac.abort());
    await assert.rejects(
      async () => {
        for await (const ev of client.watch("x", { signal: ac.signal })) assert.fail(`got a ${ev.type} event of more than the bound`);
      },
      (err: unknown) => err instanceof InternalError && err.message.includes(`event larger than ${maxAnswerBytes} bytes`),
    );
    assert.ok(c.read() <= maxAnswerBytes + (2 << 20), `read ${c.read()} bytes of the stream, want at most the bound and 2 MiB`);
  });
}

test("an answer larger than maxAnswerBytes fails, saying so", async (t) => {
  const url = await serve(t, async (res, path) => {
    if (path.includes("announced")) {
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": String(maxAnswerBytes + 1) });
      res.write("{");
      return; // the client gives up before the body
    }
    res.writeHead(200, { "Content-Type": "application/json" });
    res.write(`{"leases":[${head}`);
    if (await write(res, maxAnswerBytes)) res.end(`"}}],"nextPageToken":""}`);
  });
  for (const prefix of ["announced", "chunked"]) {
    const c = counting();
    const client = new Client(url, { fetch: c.fetch, maxAttempts: 1 });
    await assert.rejects(client.list({ prefix }), (err: unknown) => err instanceof InternalError && err.message.includes(`answer larger than ${maxAnswerBytes} bytes`), prefix);
    assert.ok(c.read() <= maxAnswerBytes + (2 << 20), `${prefix}: read ${c.read()} bytes, want at most the bound and 2 MiB`);
  }
});
