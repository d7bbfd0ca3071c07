/**
 * @leasesvc/client/pgfence against a real PostgreSQL (LEASESVC_PG_URL; the
 * Go test sdk/typescript starts a throwaway cluster), on the table Go's
 * pgfence creates (LEASESVC_PGFENCE_GO_SCHEMAS: Go's DDL): the deposed
 * holder's late write, a forged proof, an unknown key and another lease's
 * proof are refused with Go's reasons and run none of the caller's
 * statements; a failing transaction rolls the token back; the successor
 * fences first, through a pg.Pool; a serialization failure is retried, and
 * given up after `attempts`.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pg from "pg";
import { fence } from "@leasesvc/client";
import * as pgfence from "@leasesvc/client/pgfence";
import { claims, newKey, sign, staticKeys, type TestKey } from "./helpers/proofs.js";

const url = process.env["LEASESVC_PG_URL"] ?? "";
const skip = url === "" ? "LEASESVC_PG_URL is not set: go test ./sdk/typescript runs these tests with a throwaway PostgreSQL" : undefined;
if (skip && process.env["CI"] === "true") throw new Error(skip);

const lease = "team-a.scheduler";

/** refusal asserts that p rejects with a FenceError of reason. */
async function refusal(p: Promise<unknown>, reason: fence.FenceReason): Promise<void> {
  const e = await p.then(
    (v) => assert.fail(`admitted (${JSON.stringify(v)}), want ${reason}`),
    (e: unknown) => e,
  );
  assert.ok(e instanceof fence.FenceError, String(e));
  assert.equal(e.reason, reason, e.message);
}

describe("pgfence", { skip: skip || undefined }, () => {
  let admin: pg.Client;
  let conn: pg.Client;
  let k: TestKey;
  let stranger: TestKey;
  let verifier: fence.Verifier;
  let seq = 0;

  before(async () => {
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    conn = new pg.Client({ connectionString: url });
    await conn.connect();
    const goSchemas = JSON.parse(process.env["LEASESVC_PGFENCE_GO_SCHEMAS"] ?? "{}") as Record<string, string>;
    // Go's DDL creates the table when given: TypeScript writes on Go's table.
    await admin.query(goSchemas[""] ?? pgfence.schema());
    await admin.query("CREATE TABLE IF NOT EXISTS ts_items (id text PRIMARY KEY)");
    k = await newKey();
    stranger = await newKey();
    verifier = new fence.Verifier(staticKeys(k), "leasesvc");
  });
  after(async () => {
    await conn?.end();
    await admin?.end();
  });

  const proof = (name: string, token: number, key: TestKey = k) => sign(key, claims(name, token));
  const newResource = () => `ts_res_${process.pid}_${++seq}`;
  const insert = (id: string) => async (db: pgfence.PgClient) => {
    await db.query("INSERT INTO ts_items VALUES ($1)", [id]);
  };
  const stored = async (resource: string) => {
    const r = await admin.query<{ lease: string; fencing_token: string }>("SELECT lease, fencing_token FROM leasesvc_fence WHERE resource = $1", [resource]);
    return r.rows[0] ? [r.rows[0].lease, Number(r.rows[0].fencing_token)] : undefined;
  };
  const items = async (resource: string) =>
    (await admin.query<{ id: string }>("SELECT id FROM ts_items WHERE id LIKE $1 ORDER BY id", [`${resource}/%`])).rows.map((r) => r.id);

  test("schema() is Go's pgfence.Schema, for the default table and for names to quote", () => {
    const goSchemas = JSON.parse(process.env["LEASESVC_PGFENCE_GO_SCHEMAS"] ?? "{}") as Record<string, string>;
    assert.ok(Object.keys(goSchemas).length > 1 || process.env["CI"] !== "true", "the Go test passes LEASESVC_PGFENCE_GO_SCHEMAS");
    for (const [table, ddl] of Object.entries(goSchemas)) assert.equal(pgfence.schema(table), ddl, `table ${JSON.stringify(table)}`);
    assert.match(pgfence.schema(), /^CREATE TABLE IF NOT EXISTS "leasesvc_fence" \(/);
  });

  test("the deposed holder's late write, a forged proof, an unknown key, a bare token and another lease's proof are refused and run nothing; a failing transaction keeps no token", async () => {
    const resource = newResource();
    const w = (p: string, writes?: (db: pgfence.PgClient) => Promise<unknown>) => pgfence.write(conn, { lease, resource, proof: p, verifier, writes });
    assert.equal((await w(await proof(lease, 1), insert(`${resource}/first`))).fencingToken, 1);
    await w(await proof(lease, 2), insert(`${resource}/second`));
    await w(await proof(lease, 2), insert(`${resource}/again`)); // an equal token: one holder writes many times
    let ran = false;
    const spy = async () => {
      ran = true;
    };
    const forged = (await sign(stranger, claims(lease, 99))).split(".");
    const [h] = (await proof(lease, 1)).split(".");
    await refusal(w(await proof(lease, 1), spy), "stale");
    await refusal(w(`${h}.${forged[1]}.${forged[2]}`, spy), "bad_signature"); // our kid, another key's signature
    await refusal(w(await proof(lease, 99, stranger), spy), "unknown_key");
    await refusal(w("99", spy), "malformed");
    await refusal(w(await proof("team-b.mailer", 99), spy), "other_lease");
    const boom = new Error("boom");
    await assert.rejects(
      w(await proof(lease, 3), async (db) => {
        await insert(`${resource}/partial`)(db);
        throw boom;
      }),
      (e) => e === boom,
    );
    assert.equal(ran, false, "a refused proof ran the caller's writes");
    assert.deepEqual(await items(resource), [`${resource}/again`, `${resource}/first`, `${resource}/second`]);
    assert.deepEqual(await stored(resource), [lease, 2], "a failing transaction kept its token");
  });

  test("another lease's proof does not bind a resource never written; a row of another lease keeps refusing; an empty lease is refused", async () => {
    const resource = newResource();
    await refusal(pgfence.write(conn, { lease, resource, proof: await proof("team-b.mailer", 99), verifier }), "other_lease");
    assert.equal(await stored(resource), undefined);
    await assert.rejects(pgfence.write(conn, { lease: "", resource, proof: await proof(lease, 1), verifier }), TypeError);
    await admin.query("INSERT INTO leasesvc_fence (resource, lease, fencing_token) VALUES ($1, 'team-b.mailer', 5)", [resource]);
    await refusal(pgfence.write(conn, { lease, resource, proof: await proof(lease, 9), verifier }), "other_lease");
    assert.deepEqual(await stored(resource), ["team-b.mailer", 5]);
  });

  test("through a pg.Pool: the successor fences first, so the deposed holder's write is refused before the successor's first own write; every client goes back", async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const resource = newResource();
      await pgfence.write(pool, { lease, resource, proof: await proof(lease, 1), verifier, writes: insert(`${resource}/first`) });
      const c = await pgfence.fenceFirst(pool, { lease, resource, proof: await proof(lease, 2), verifier });
      assert.equal(c.fencingToken, 2);
      assert.deepEqual(await stored(resource), [lease, 2]);
      await refusal(pgfence.write(pool, { lease, resource, proof: await proof(lease, 1), verifier, writes: insert(`${resource}/late`) }), "stale");
      assert.deepEqual(await items(resource), [`${resource}/first`]);
      assert.equal(pool.idleCount, pool.totalCount, "a client was not released");
    } finally {
      await pool.end();
    }
  });

  test("a serialization failure (SQLSTATE 40001) is run again; every attempt failing is a SerializationError that stored nothing", async () => {
    const serializable = new pg.Client({ connectionString: url, options: "-c default_transaction_isolation=serializable" });
    await serializable.connect();
    try {
      for (const meddled of [1, pgfence.attempts]) {
        const resource = newResource();
        await pgfence.fenceFirst(conn, { lease, resource, proof: await proof(lease, 1), verifier });
        // The first `meddled` transactions take their snapshot, then see
        // another connection update the resource's row: the upsert fails.
        let begun = 0;
        const db: pgfence.PgClient = {
          query: async (text, values) => {
            const r = await serializable.query(text, values);
            if (text === "BEGIN" && ++begun <= meddled) {
              await serializable.query("SELECT 1");
              await admin.query("UPDATE leasesvc_fence SET updated_at = now() WHERE resource = $1", [resource]);
            }
            return r;
          },
        };
        let ran = 0;
        const p = pgfence.write(db, { lease, resource, proof: await proof(lease, 2), verifier, writes: async (tx) => {
          ran++;
          await insert(`${resource}/second`)(tx);
        } });
        if (meddled < pgfence.attempts) {
          await p;
          assert.equal(begun, 2, "the first attempt met no serialization failure: the test proves nothing");
          assert.deepEqual([ran, await stored(resource), await items(resource)], [1, [lease, 2], [`${resource}/second`]]);
        } else {
          const e = await p.then(() => assert.fail("admitted"), (e: unknown) => e);
          assert.ok(e instanceof pgfence.SerializationError, String(e));
          assert.equal(pgfence.sqlState(e.cause), "40001");
          assert.deepEqual([begun, ran, await stored(resource)], [pgfence.attempts, 0, [lease, 1]]);
        }
      }
    } finally {
      await serializable.end();
    }
  });
});
