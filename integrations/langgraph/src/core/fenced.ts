/**
 * Writes to Firestore fenced by a thread's lease (docs/contract.md §17), in
 * one transaction: the proof of the current holding (from a Fencing) is
 * verified with the SDK's Verifier (signature, key, issuer), must be for the
 * thread's lease, and its token must be at least the one stored for the
 * thread, which the transaction then stores with the writes. The token
 * document is the one of the Go package fence/firestorefence: collection
 * "leasesvc-fence", document id the resource (here the lease name), fields
 * lease and fencingToken; a store written from Go and from here is fenced
 * alike.
 *
 * The token document is read first in the transaction, so a transaction
 * that read a token another one raised before it committed is retried by
 * Firestore and then refused as stale: a deposed holder's late write is
 * refused by the database, not by a check in the process.
 */
import type { DocumentReference, Firestore, Transaction } from "@google-cloud/firestore";
import { fence } from "@leasesvc/client";
import { FencedWriteError } from "./errors.js";
import type { Fencing } from "./runs.js";

/**
 * How long a fenced write goes on retrying a transaction that Firestore
 * aborted (gRPC ABORTED, such as "Transaction lock timeout"), after the
 * client's own attempts, ms. Under pessimistic concurrency (the default of
 * a Firestore database) a transaction of a replica killed between its reads
 * and its commit keeps its locks, the token document's among them, until
 * Firestore expires it (up to 60 s idle); the successor's writes wait for
 * that. A database in optimistic concurrency mode has no such wait.
 */
export const abortedRetryMs = 60_000;

/** The collection of the stored tokens unless told otherwise (the Go package's DefaultCollection). */
export const defaultFenceCollection = "leasesvc-fence";

/** What a FirestoreFence needs. */
export interface FenceOptions {
  /** The database written. */
  db: Firestore;
  /** Verifies proofs: the service's keys (fence.RemoteKeys at /.well-known/jwks.json, or a saved JWKS) and its issuer. */
  verifier: fence.Verifier;
  /** Hands out the proof of the current holding of a thread (Runs). */
  fencing: Fencing;
  /** The collection of the tokens. Default "leasesvc-fence". */
  fenceCollection?: string;
}

/** The stored token of a resource. */
interface StoredToken {
  lease: string;
  fencingToken: number;
}

/** FirestoreFence runs writes fenced by a lease, each in one transaction, as the module's doc says. */
export class FirestoreFence {
  readonly db: Firestore;
  readonly verifier: fence.Verifier;
  readonly fencing: Fencing;
  readonly collection: string;

  constructor(o: FenceOptions) {
    if (o.db === undefined || o.verifier === undefined || o.fencing === undefined) throw new TypeError("leasesvc: a fenced store needs db, verifier and fencing");
    this.db = o.db;
    this.verifier = o.verifier;
    this.fencing = o.fencing;
    this.collection = o.fenceCollection ?? defaultFenceCollection;
  }

  /** The token document of lease. */
  tokenDoc(lease: string): DocumentReference {
    return this.db.collection(this.collection).doc(lease);
  }

  /**
   * Runs body in one transaction fenced by lease, as the module's doc says,
   * and resolves to its result. body must do all its reads before its first
   * write (Firestore's rule) and may run more than once (Firestore retries
   * a transaction that lost a race). A refusal is a FencedWriteError and
   * rolls everything back; so does an error of body, rejected as it is.
   */
  write<T>(lease: string, body: (tx: Transaction) => Promise<T>): Promise<T> {
    const p = this.#write(lease, body);
    let set = this.#inflight.get(lease);
    if (set === undefined) this.#inflight.set(lease, (set = new Set()));
    const done = p.then(
      () => undefined,
      () => undefined,
    );
    set.add(done);
    void done.then(() => {
      set.delete(done);
      if (set.size === 0 && this.#inflight.get(lease) === set) this.#inflight.delete(lease);
    });
    return p;
  }

  /**
   * Resolves once every write of lease begun so far has committed or
   * failed: a run that stops waits for its writes before it releases the
   * lease, so that its last checkpoint is there when the next run starts.
   */
  async settled(lease: string): Promise<void> {
    for (let set = this.#inflight.get(lease); set !== undefined && set.size > 0; set = this.#inflight.get(lease)) await Promise.all(set);
  }

  async #write<T>(lease: string, body: (tx: Transaction) => Promise<T>): Promise<T> {
    const proof = await this.fencing.proof(lease);
    let claims: fence.Claims;
    try {
      claims = await this.verifier.verify(proof);
    } catch (err) {
      if (err instanceof fence.FenceError && err.reason !== "missing") throw new FencedWriteError(lease, err.reason, err.message, { cause: err });
      throw err;
    }
    if (claims.lease !== lease) throw new FencedWriteError(lease, "other_lease", `the proof is for ${JSON.stringify(claims.lease)}`);
    const doc = this.tokenDoc(lease);
    const out = await retryAborted(() => this.db.runTransaction(async (tx) => {
      const snap = await tx.get(doc);
      let stored = 0;
      if (snap.exists) {
        const t = snap.data() as Partial<StoredToken>;
        if (t.lease !== lease) throw new FencedWriteError(lease, "other_lease", `the token document holds lease ${JSON.stringify(t.lease)} (a document this store did not write: remove it to let ${JSON.stringify(lease)} fence the thread)`);
        stored = typeof t.fencingToken === "number" ? t.fencingToken : 0;
        if (stored > claims.fencingToken) throw new FencedWriteError(lease, "stale", `token ${claims.fencingToken} of ${JSON.stringify(lease)}, but token ${stored} has written`);
      }
      const r = await body(tx);
      if (claims.fencingToken > stored) tx.set(doc, { lease, fencingToken: claims.fencingToken } satisfies StoredToken);
      return r;
    }));
    this.fencing.check(lease, claims.fencingToken);
    return out;
  }

  /**
   * Stores the current holding's token for lease (a write with nothing
   * else): a new run fences first, before it reads, so that its
   * predecessor's late writes are refused from then on, not only from its
   * own first write.
   */
  async fenceFirst(lease: string): Promise<void> {
    await this.write(lease, async () => undefined);
  }

  #warm: Promise<void> | undefined;
  readonly #inflight = new Map<string, Set<Promise<void>>>();

  /**
   * Makes the client's first request (a read of one token document), once:
   * the first request of a Firestore client loads its protocol definitions,
   * which blocks the event loop for a while (over a second was seen on a
   * loaded machine), long enough to miss a session's heartbeats. The
   * wrappers call it before they acquire a thread's lease.
   */
  warm(): Promise<void> {
    this.#warm ??= this.tokenDoc("warm").get().then(
      () => undefined,
      (err: unknown) => {
        this.#warm = undefined;
        throw err;
      },
    );
    return this.#warm;
  }

  /** The stored token of lease; 0 if none. */
  async storedToken(lease: string): Promise<number> {
    const snap = await this.tokenDoc(lease).get();
    const t = snap.data() as Partial<StoredToken> | undefined;
    return typeof t?.fencingToken === "number" ? t.fencingToken : 0;
  }
}

/** retryAborted runs tx again while it rejects with gRPC ABORTED (code 10), for up to abortedRetryMs. */
async function retryAborted<T>(tx: () => Promise<T>): Promise<T> {
  const until = Date.now() + abortedRetryMs;
  for (let n = 0; ; n++) {
    try {
      return await tx();
    } catch (err) {
      if ((err as { code?: unknown }).code !== 10 || Date.now() >= until) throw err;
      await new Promise((r) => setTimeout(r, Math.min(1000, 50 * 2 ** n)));
    }
  }
}
