import assert from "node:assert/strict";
import { test } from "node:test";
import { validName } from "@leasesvc/client";
import { checkPrefix, idPart, leaseName } from "../src/index.js";

test("plain ids stand as they are; others are hashed; every name is valid (docs/contract.md §1)", () => {
  assert.equal(leaseName("langgraph.thread", "t-1_A"), "langgraph.thread.t-1_A");
  assert.equal(leaseName("adk.session", "app", "user", "s1"), "adk.session.app.user.s1");
  for (const id of ["a.b", "a/b", "with space", "", "_x", "-x", "ü", "x".repeat(49), "__proto__"]) {
    const p = idPart(id);
    assert.match(p, /^_[0-9a-f]{32}$/, id);
    assert.ok(validName(leaseName("langgraph.thread", id)), id);
  }
  assert.notEqual(idPart("a.b"), idPart("a/b"));
  assert.equal(idPart("x".repeat(48)), "x".repeat(48));
  // A plain id never starts with "_", so it never meets a hashed one.
  assert.notEqual(leaseName("p", idPart("a.b")), leaseName("p", "a.b"));
  // Names stay within 128 characters: the ids are hashed together.
  const long = leaseName("p".repeat(90), "a".repeat(40), "b".repeat(40));
  assert.ok(long.length <= 128 && validName(long), long);
  assert.notEqual(leaseName("adk.session", "a.b", "c"), leaseName("adk.session", "a", "b.c"));
});

test("bad prefixes are refused", () => {
  for (const p of ["", ".x", "x.", "a b", "leasesvc.session", "p".repeat(91)]) assert.throws(() => checkPrefix(p), RangeError, p);
  assert.equal(checkPrefix("team-a.agents"), "team-a.agents");
});
