import assert from "node:assert/strict";
import { test } from "node:test";

import { RateLimitedError } from "../src/errors.js";
import { SessionLimitError } from "../src/sessiontypes.js";
import { refusal } from "../src/socket.js";

test("an upgrade refused at the cap of sessions is a SessionLimitError; the rate limit is not", () => {
  const capped = refusal(429, JSON.stringify({ code: "resource_exhausted", detail: "too many sessions of this instance", limit: "sessions" }), "1");
  assert.ok(capped instanceof SessionLimitError, `got ${capped.constructor.name}`);
  assert.equal(capped.retryAfterMs, 1000);
  const limited = refusal(429, JSON.stringify({ code: "resource_exhausted", detail: "rate limit exceeded" }), "2");
  assert.ok(limited instanceof RateLimitedError && !(limited instanceof SessionLimitError), `got ${limited.constructor.name}`);
  const other = refusal(503, JSON.stringify({ code: "unavailable", limit: "sessions" }), "1");
  assert.ok(!(other instanceof SessionLimitError), "a 503 naming the cap is not a session limit");
});
