import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client, Elector, SessionsUnsupportedError, type ElectorLogger } from "@leasesvc/client";
import { FakeService } from "./helpers/fake.js";

// A runtime without WebSocket (Node 20 without the ws package) cannot hold
// a session: the Elector renews plainly, and a kill -9'd leader is replaced
// after its TTL (27.6 s measured) instead of about a second. It must say so
// (issue 38 item 1), not fall back in silence.

let fake: FakeService;
before(async () => {
  fake = await FakeService.start();
});
after(async () => {
  await fake.close();
});

let seq = 0;

/** noWebSocket returns a Client whose sessions fail as dial fails in a runtime without WebSocket. */
function noWebSocket(): Client {
  const c = new Client(fake.url, { backoff: { initialMs: 5, maxMs: 20 }, requestTimeoutMs: 2000 });
  c.openSession = () =>
    Promise.reject(new SessionsUnsupportedError("leasesvc session: this runtime has no WebSocket: install the ws package (npm install ws) to hold leases through sessions"));
  return c;
}

/** leadOnce runs an Elector until it leads, then stops it. */
async function leadOnce(c: Client, logger?: ElectorLogger): Promise<void> {
  let led!: () => void;
  const leading = new Promise<void>((resolve) => (led = resolve));
  const e = Elector.forClient(
    c,
    `nows.${process.pid}.${++seq}`,
    {
      holder: "h",
      ...(logger === undefined ? {} : { logger }),
      callbacks: {
        onStartedLeading: (signal) =>
          new Promise<void>((resolve) => {
            led();
            signal.addEventListener("abort", () => resolve());
          }),
      },
    },
    { ttlMs: 900 },
  );
  const ac = new AbortController();
  const run = e.run(ac.signal);
  await leading;
  ac.abort();
  await run;
}

test("without a logger, an Elector that cannot hold a session warns once per process on the console", async () => {
  const warnings: string[] = [];
  const orig = console.warn;
  console.warn = (...args: unknown[]) => void warnings.push(args.map(String).join(" "));
  try {
    const c = noWebSocket();
    await leadOnce(c);
    await leadOnce(c);
    await leadOnce(noWebSocket());
  } finally {
    console.warn = orig;
  }
  assert.equal(warnings.length, 1, `warnings: ${JSON.stringify(warnings)}`);
  assert.match(warnings[0] ?? "", /sessions are unavailable .*no WebSocket.*plain renewals.*TTL \(900 ms\).*Install ws/);
});

test("with a logger, the warning goes to the logger", async () => {
  const warned: string[] = [];
  await leadOnce(noWebSocket(), { info() {}, warn: (m) => void warned.push(m) });
  assert.ok(warned.some((m) => m.includes("sessions are unavailable")), `warned: ${JSON.stringify(warned)}`);
});

test("plainRenewals: true chooses plain renewals and warns nothing", async () => {
  const warnings: string[] = [];
  const orig = console.warn;
  console.warn = (...args: unknown[]) => void warnings.push(args.map(String).join(" "));
  try {
    const c = noWebSocket();
    let led!: () => void;
    const leading = new Promise<void>((resolve) => (led = resolve));
    const e = Elector.forClient(
      c,
      `nows.${process.pid}.${++seq}`,
      {
        holder: "h",
        callbacks: {
          onStartedLeading: (signal) =>
            new Promise<void>((resolve) => {
              led();
              signal.addEventListener("abort", () => resolve());
            }),
        },
      },
      { ttlMs: 900, plainRenewals: true },
    );
    const ac = new AbortController();
    const run = e.run(ac.signal);
    await leading;
    ac.abort();
    await run;
  } finally {
    console.warn = orig;
  }
  assert.deepEqual(warnings, []);
});
