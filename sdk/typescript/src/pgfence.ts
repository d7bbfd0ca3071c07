/**
 * Fencing writes to PostgreSQL with leasesvc's proofs (docs/contract.md
 * §17, docs/fencing.md): the TypeScript twin of Go's fence/pgfence, on the
 * same table, over node-postgres (`pg` 8.x, an optional peer dependency:
 * this module never imports it, it takes any client with `query`).
 *
 * write runs the caller's statements in one transaction only if the proof
 * verifies, is for the lease that fences the resource, and has a fencing
 * token at least the one stored for the resource; it stores the token in
 * the same transaction. The token lives in a table of its own (schema), one
 * row per resource, in the same database as the data: the first statement
 * locks the resource's row until the transaction ends, so two writers of
 * one resource are ordered by the database, and a deposed holder's late
 * transaction finds the successor's higher token and is refused before any
 * of its statements run. The Go, Python and TypeScript helpers share the
 * table: a resource one fenced is written by the others.
 *
 * A transaction needs one connection: pass a pg.Client, a client from
 * `await pool.connect()`, or the pg.Pool itself (write then takes a client
 * from it for the transaction and releases it). Never a pool's `query`
 * alone: each call may run on another connection.
 */
import { type Claims, FenceError, type Verifier } from "./fence.js";

/** The table of the stored tokens unless told otherwise (Go's pgfence.DefaultTable). */
export const defaultTable = "leasesvc_fence";

/** How many times write runs its transaction while it fails to serialize (Go's pgfence.Attempts). */
export const attempts = 5;

/** The backoff before the second attempt, in milliseconds; it doubles after each, with jitter. */
export const retryBaseMs = 2;

/** What write needs of a connection: node-postgres's Client and PoolClient have it. */
export interface PgClient {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** A client a pool lent, given back with release (node-postgres's PoolClient). */
export interface PgPoolClient extends PgClient {
  release(err?: Error | boolean): void;
}

/** What write needs of a pool (node-postgres's Pool): it lends one client per transaction. */
export interface PgPool<C extends PgPoolClient = PgPoolClient> {
  connect(): Promise<C>;
  readonly totalCount: number;
}

/** Options of write. */
export interface WriteOptions<C extends PgClient = PgClient> {
  /** The lease that fences the resource: a proof for any other is refused ("other_lease"). */
  lease: string;
  /** The resource written: the key of its row in the token table. */
  resource: string;
  /** The holding's proof (Lease.proof). */
  proof: string;
  /** Checks the proof against the service's keys. */
  verifier: Verifier;
  /** The caller's statements, on the transaction's client; absent: only the token is stored (fenceFirst). They may run more than once (a retried transaction): keep them free of effects outside it. */
  writes?: ((client: C) => Promise<unknown>) | undefined;
  /** The token table; "" or absent: defaultTable (create it with schema). */
  table?: string;
  /** Aborts a fetch of the keys and the backoff between attempts. */
  signal?: AbortSignal;
}

/**
 * Every attempt of a write failed to serialize with a concurrent
 * transaction (SQLSTATE 40001 or 40P01); nothing of it was stored, and
 * running it again may succeed. Its cause is the database's last error.
 * Not a FenceError: no verdict on the proof (Go's pgfence.ErrSerialization).
 */
export class SerializationError extends Error {
  override readonly name = "SerializationError";
}

/** The table name as one quoted SQL identifier, as Go's pgx.Identifier{table}.Sanitize(): NUL removed, `"` doubled. */
function identifier(table: string): string {
  return `"${table.replaceAll("\x00", "").replaceAll('"', '""')}"`;
}

/**
 * schema returns the statement that creates the token table ("" means
 * defaultTable): the very text of Go's pgfence.Schema, so the three
 * languages' helpers share the table. CREATE TABLE IF NOT EXISTS: run it at
 * every start.
 */
export function schema(table = ""): string {
  return `CREATE TABLE IF NOT EXISTS ${identifier(table || defaultTable)} (
	resource      text PRIMARY KEY,
	lease         text NOT NULL,
	fencing_token bigint NOT NULL CHECK (fencing_token > 0),
	updated_at    timestamptz NOT NULL DEFAULT now()
)`;
}

/** The SQLSTATE of a driver's error (node-postgres's DatabaseError.code), "" if none. */
export function sqlState(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : "";
}

const retryable = new Set(["40001", "40P01"]);

function isPool(db: unknown): db is PgPool {
  const p = db as Partial<PgPool> | null;
  return typeof p?.totalCount === "number" && typeof p.connect === "function";
}

/**
 * write verifies the proof and requires it to be for lease, the lease that
 * fences resource; then, in one transaction, stores its token for resource
 * if it is at least the stored one (of the same lease), runs writes on the
 * transaction's client, and commits. It resolves to the proof's claims.
 *
 * A refused proof stores nothing and never runs writes: it rejects with a
 * FenceError, the verifier's ("malformed", "bad_signature", "unknown_key",
 * "wrong_issuer", "keys_unavailable"), or "other_lease" (the proof is for
 * another lease than lease, for a resource never written too, or the
 * resource's row is another lease's), or "stale" (a higher token wrote).
 * An error of writes rolls everything back, the token included, and is
 * thrown unchanged. Without writes only the token is stored (fenceFirst).
 *
 * A transaction that fails to serialize with a concurrent one (SQLSTATE
 * 40001 under repeatable read or serializable isolation, or 40P01) is
 * rolled back and run again, writes included, up to `attempts` times with
 * a short jittered backoff; then a SerializationError.
 *
 * db is one connection, never in a transaction of the caller's (write
 * sends BEGIN and COMMIT on it), or a pool it takes one from.
 */
export async function write<C extends PgPoolClient>(db: PgPool<C>, opts: WriteOptions<C>): Promise<Claims>;
export async function write<C extends PgClient>(db: C, opts: WriteOptions<C>): Promise<Claims>;
export async function write(db: PgClient | PgPool, opts: WriteOptions<PgClient>): Promise<Claims> {
  return run(db, opts);
}

/**
 * fenceFirst is write without writes: it advances resource to the proof's
 * token and writes nothing else. A successor calls it as soon as it leads,
 * so that its predecessor's late writes are refused ("stale") before its
 * own first write.
 */
export async function fenceFirst<C extends PgPoolClient>(db: PgPool<C>, opts: Omit<WriteOptions<C>, "writes">): Promise<Claims>;
export async function fenceFirst<C extends PgClient>(db: C, opts: Omit<WriteOptions<C>, "writes">): Promise<Claims>;
export async function fenceFirst(db: PgClient | PgPool, opts: Omit<WriteOptions<PgClient>, "writes">): Promise<Claims> {
  return run(db, { ...opts, writes: undefined });
}

/** run is write: verify, then attempt while the transaction fails to serialize. */
async function run(db: PgClient | PgPool, opts: WriteOptions<PgClient>): Promise<Claims> {
  const { lease, resource, proof, verifier, writes, signal } = opts;
  if (typeof lease !== "string" || lease === "") {
    throw new TypeError(`pgfence: write of ${JSON.stringify(resource)}: lease is empty: name the lease that fences the resource`);
  }
  if (verifier === undefined || verifier === null) throw new TypeError("pgfence: write needs a verifier (fence.Verifier)");
  const t = identifier(opts.table || defaultTable);
  const c = await verifier.verify(proof, signal);
  if (c.lease !== lease) {
    throw new FenceError("other_lease", `${JSON.stringify(resource)} is fenced by lease ${JSON.stringify(lease)}, the proof is for ${JSON.stringify(c.lease)}`);
  }
  let backoff = retryBaseMs;
  for (let n = 1; ; n++) {
    try {
      if (isPool(db)) {
        const client = await db.connect();
        try {
          await attempt(client, t, resource, c, writes);
        } catch (e) {
          client.release(brokenBy.has(e as object) ? (e as Error) : undefined); // a broken connection is not lent again
          throw e;
        }
        client.release();
      } else {
        await attempt(db, t, resource, c, writes);
      }
      return c;
    } catch (e) {
      if (!retryable.has(sqlState(e))) throw e;
      if (n === attempts) {
        throw new SerializationError(`pgfence: ${JSON.stringify(resource)}, ${n} attempts: the transaction could not be serialized with a concurrent one (${(e as Error).message})`, { cause: e });
      }
    }
    await sleep(backoff / 2 + Math.random() * backoff, signal);
    backoff *= 2;
  }
}

/** The errors after which even ROLLBACK failed: their connection is broken. */
const brokenBy = new WeakSet<object>();

/**
 * attempt is one transaction of write, with c verified and for the lease
 * that fences resource, rolled back on any error, which it rethrows.
 */
async function attempt(db: PgClient, t: string, resource: string, c: Claims, writes: ((client: PgClient) => Promise<unknown>) | undefined): Promise<void> {
  try {
    await db.query("BEGIN");
    // ON CONFLICT locks the resource's row even when WHERE refuses: a
    // concurrent writer waits for this transaction's end.
    const up = await db.query(
      `INSERT INTO ${t} AS f (resource, lease, fencing_token) VALUES ($1, $2, $3)
ON CONFLICT (resource) DO UPDATE SET fencing_token = EXCLUDED.fencing_token, updated_at = now()
WHERE f.lease = EXCLUDED.lease AND f.fencing_token <= EXCLUDED.fencing_token
RETURNING fencing_token`,
      [resource, c.lease, c.fencingToken],
    );
    if (up.rows.length === 0) {
      const read = await db.query(`SELECT lease, fencing_token::text AS fencing_token FROM ${t} WHERE resource = $1`, [resource]);
      const row = read.rows[0] as { lease: string; fencing_token: string } | undefined;
      if (row === undefined) throw new Error(`pgfence: the token row of ${JSON.stringify(resource)} vanished during the transaction`);
      if (row.lease !== c.lease) {
        throw new FenceError(
          "other_lease",
          `${JSON.stringify(resource)} has the token of lease ${JSON.stringify(row.lease)}, the proof is for ${JSON.stringify(c.lease)} (a row this check did not write: remove it to let ${JSON.stringify(c.lease)} fence the resource)`,
        );
      }
      throw new FenceError("stale", `token ${c.fencingToken} of lease ${JSON.stringify(c.lease)}, but token ${row.fencing_token} wrote ${JSON.stringify(resource)}`);
    }
    if (writes !== undefined) await writes(db);
    await db.query("COMMIT");
  } catch (e) {
    try {
      await db.query("ROLLBACK");
    } catch {
      if (typeof e === "object" && e !== null) brokenBy.add(e);
    }
    throw e;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
