import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { Client, Elector, type ElectorLogger, type KeeperOptions } from "@leasesvc/client";
import { FakeService } from "./helpers/fake.js";
import { FakeSessionServer } from "./helpers/fakesession.js";

// The Elector says once how it holds its lease: to its logger when given
// one, else in one line on stderr (console.error), once per process for
// each change of mode, not per run, term or Elector.

let rest: FakeService;
let bare: FakeService;
let ses: FakeSessionServer;
before(async () => {
  rest = await FakeService.start();
  bare = await FakeService.start(); // no sessions route: 404 at the upgrade
  ses = await FakeSessionServer.start();
  rest.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => ses.server.emit("upgrade", req, socket, head));
});
after(async () => {
  await rest.close();
  await bare.close();
  await ses.close();
});

const client = (url: string): Client => new Client(url, { requestTimeoutMs: 2000, backoff: { initialMs: 5, maxMs: 20 } });

/** leadOnce runs an Elector of name (over a keeper of its own: Elector.forClient) until it leads, then stops it. */
async function leadOnce(c: Client, name: string, logger?: ElectorLogger, ko: KeeperOptions = {}): Promise<void> {
  let led!: () => void;
  const leading = new Promise<void>((resolve) => (led = resolve));
  const callbacks = {
    onStartedLeading: (signal: AbortSignal) =>
      new Promise<void>((resolve) => {
        led();
        signal.addEventListener("abort", () => resolve());
      }),
  };
  const e = Elector.forClient(c, name, { holder: "h", callbacks, ...(logger === undefined ? {} : { logger }) }, { ttlMs: 3000, ...ko });
  const ac = new AbortController();
  const run = e.run(ac.signal);
  await leading;
  ac.abort();
  await run;
}

test("without a logger, the Elector says its mode on stderr once per change of mode", async () => {
  const lines: string[] = [];
  const orig = console.error;
  console.error = (...args: unknown[]) => void lines.push(args.map(String).join(" "));
  try {
    const c = client(rest.url);
    await leadOnce(c, "mode.a");
    await leadOnce(c, "mode.a"); // a second run, a second term: the same mode
    await leadOnce(c, "mode.b"); // another Elector in the same mode
    assert.deepEqual(lines, ['leasesvc: elector "mode.a" holds through a session (window 1s)']);
    await leadOnce(client(bare.url), "mode.plain");
    assert.equal(lines.length, 2, JSON.stringify(lines));
    assert.match(lines[1] ?? "", /^leasesvc: elector "mode\.plain" holds with plain renewals \(.*(404|no sessions).*\)$/);
    await leadOnce(client(rest.url), "mode.chosen", undefined, { plainRenewals: true });
    await leadOnce(client(rest.url), "mode.chosen", undefined, { plainRenewals: true });
    assert.deepEqual(lines.slice(2), ['leasesvc: elector "mode.chosen" holds with plain renewals (plainRenewals: true)']);
    await leadOnce(c, "mode.a");
    assert.deepEqual(lines.slice(3), ['leasesvc: elector "mode.a" holds through a session (window 1s)'], "back to a session: said again");
  } finally {
    console.error = orig;
  }
});

test("with a logger, the mode goes to the logger and nothing to stderr", async () => {
  const lines: string[] = [];
  const logs: string[] = [];
  const logger: ElectorLogger = { info: (m) => void logs.push(m), warn: (m) => void logs.push(m) };
  const orig = console.error;
  console.error = (...args: unknown[]) => void lines.push(args.map(String).join(" "));
  try {
    await leadOnce(client(bare.url), "mode.logged", logger);
  } finally {
    console.error = orig;
  }
  assert.deepEqual(lines, []);
  assert.ok(logs.includes("leasesvc elector: plain renewals"), logs.join("\n"));
});
