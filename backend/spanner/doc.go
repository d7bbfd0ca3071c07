// Package spanner is the Cloud Spanner lease backend: one row per lease in
// the Leases table of schema.sql, read and written in read-write
// transactions, with Spanner's clock as the server clock.
//
// # Clock
//
// Every decision is made with Spanner's time, never the process's:
// Try reads CURRENT_TIMESTAMP() inside its read-write transaction, then
// the row by key (which locks the key), and passes that time (or the row's
// commit timestamp, when later: a time at which the row was as read) to
// decide; the
// acquire, renew and expire times derive from it and are stored in plain
// TIMESTAMP columns (a commit-timestamp column refuses the future expire
// time). UpdateTime is the commit timestamp, for operators. Get and List are
// strong single reads whose server time is the read timestamp: the database
// as of that instant, so a later read never shows an earlier time than a
// write it sees.
//
// # Concurrency
//
// Try, one attempt, is one read-write transaction: Spanner's locks make its
// read and its write one serializable step, and two processes that race for
// a lease cannot both win. backend.Loop drives it: one transaction per
// lease name at a time in a process (they would serialize on the row's lock
// anyway; backend.WithOneAtATime makes that one at a time for all names,
// which the emulator needs), and retries of transactions that lost a race
// (the client library retries Aborted itself; the Loop retries what reaches
// it, and what the emulator answers for a transaction it ended because
// another began), bounded by backend.WithMaxAttempts and the caller's
// context. Retries counts them and backend.WithRetryHook reports each.
// These are the Loop's settings: the service's opener returns them beside
// the Store (backend.Opened.Loop), and the Store never acts on them.
//
// # Batching
//
// The Store is a backend.BatchStore: TryBatch makes several attempts, on
// distinct leases, in one read-write transaction, and the Store declares
// its limit (WithBatchMax, Hints.MaxBatch). The queueing, the splitting of
// a transaction that fails as a whole and each caller's answer are
// backend.Loop's.
//
// Before its transaction an Update may decide once on a strong single read
// (the fast path, see FastPath, which the Store asks of the Loop through
// its Hints): an acquire refused as lease_held, a renew that is lease_lost
// or an idempotent release returns from that read without taking any lock,
// so followers polling a held lease never contend with its holder's
// renewals. An answer that writes pays that read on top of the transaction,
// so by default (FastPathAdaptive) the Loop reads first only when the
// previous Update of the lease in this process wrote nothing, and not for
// the attempt of a waiting acquire woken because the holding it waits for
// may have ended, so a handoff costs one transaction, not a read and a
// transaction.
//
// # Limits
//
// The guarantees are those of package lease over a store that keeps its
// records: fencing tokens are never reused, across restarts of the service
// too, as long as the Leases table is kept. The backend trusts Spanner's
// TrueTime-bounded clock; it has no clock assumptions of its own. A commit
// whose outcome is unknown (the context ended during Commit) is reported as
// context.DeadlineExceeded or context.Canceled, although the write may have
// been applied; acquire is idempotent for its holder, so a retry recovers.
// The schema is never altered automatically: Migrate creates a missing table
// and refuses one that differs from schema.sql.
//
// # Row
//
// A row holds the backend.Row it is given (lease.EncodeRow splits a lease
// record into one): the
// columns Name, Holder, FencingToken, TtlMs, AcquireTime, RenewTime,
// ExpireTime (the LeasesByExpireTime index serves the sweeper), Transitions,
// Metadata and Principal, and in Succession (named for its first content)
// backend.Row.Value, one JSON object of every other field of the record
// (revocation, succession state of docs/contract.md §8, checkpoint,
// reservation, deletion, session), NULL for none. The package never names
// those fields: a new one changes no schema.
//
// Versions before the revocation joined that value kept it in the columns
// RevokedBy and RevokeReason. They are read still (backend.Legacy: the value
// wins where it holds the revocation) and every write sets them to NULL, so
// a row's old revocation never outlives its next write. An instance of such
// a version (during a rolling upgrade, or after going back to one) reads a
// revocation written by this one as a holding that ended without one, and
// drops it if it writes the record.
package spanner
