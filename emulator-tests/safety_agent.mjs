// The TypeScript SDK's agent of the safety runs (emulator-tests,
// safety_sdk_test.go), run as `node emulator-tests/safety_agent.mjs` with
// LEASESVC_URL, LEASE_NAME, LEASE_HOLDER, LEASE_TTL_MS and LEASE_PRIORITY
// (the Elector's priority, docs/contract.md §8) in the environment, as the
// conformance agents are (sdk/conformance/PROTOCOL.md), once
// sdk/typescript/dist is built. It runs the SDK's Elector on LEASE_NAME
// with its defaults (through the Client's shared session, docs/contract.md
// §14), and resigns each term after 0.2–1.5 s so that the lease changes
// hands; then it campaigns again. It writes one JSON line per step:
// {"step":"leading","token":N,"mono":"NS"} when a term begins and
// {"step":"stopped","token":N,"mono":"NS"} when it stops leading (NS:
// CLOCK_MONOTONIC nanoseconds, which process.hrtime reads on Linux, as a
// string). A "stop" line or the end of stdin ends it (the Elector
// releases).
import { createInterface } from "node:readline";
import { Client, Elector } from "../sdk/typescript/dist/index.js";

const emit = (line) => process.stdout.write(JSON.stringify(line) + "\n");
const mono = () => process.hrtime.bigint().toString();

const stop = new AbortController();
const rl = createInterface({ input: process.stdin });
rl.on("line", (line) => {
  if (line.trim() === "stop") stop.abort(new Error("stop"));
});
rl.on("close", () => stop.abort(new Error("stdin closed")));

const client = new Client(process.env.LEASESVC_URL);
const name = process.env.LEASE_NAME;
const holder = process.env.LEASE_HOLDER;
const ttlMs = Number(process.env.LEASE_TTL_MS ?? "3000");
const priority = Number(process.env.LEASE_PRIORITY ?? "0");

while (!stop.signal.aborted) {
  const e = new Elector(client, name, {
    holder,
    ttlMs,
    priority,
    // Returning resigns: the lease is released and run returns.
    onStartedLeading: (signal, token) =>
      new Promise((resolve) => {
        emit({ step: "leading", token, mono: mono() });
        let done = false;
        const end = () => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          emit({ step: "stopped", token, mono: mono() });
          resolve();
        };
        const timer = setTimeout(end, 200 + Math.random() * 1300);
        if (signal.aborted) end();
        else signal.addEventListener("abort", end, { once: true });
      }),
    logger: {
      info: (m, f) => process.stderr.write(`${m} ${JSON.stringify(f ?? {})}\n`),
      warn: (m, f) => process.stderr.write(`${m} ${JSON.stringify(f ?? {})}\n`),
    },
  });
  try {
    await e.run(stop.signal);
  } catch (err) {
    process.stderr.write(`elector: ${err}\n`);
    await new Promise((r) => setTimeout(r, 500));
  }
}
process.exit(0);
