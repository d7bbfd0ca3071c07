// Package postgres is the PostgreSQL lease backend (docs/contract.md §13):
// one row per lease in one table, with PostgreSQL's clock as the server
// clock. Cloud SQL and AlloyDB for PostgreSQL are the managed targets.
//
// # Clock
//
// Try, one attempt, runs one READ COMMITTED transaction: it locks the row
// (SELECT … FOR UPDATE) and, in the same statement but after the lock is
// granted and the latest committed version is read, takes clock_timestamp().
// A decision therefore never precedes the commit of the state it read, the
// rule that keeps holdings ordered (docs/contract.md §2). The write is one
// INSERT … ON CONFLICT (name) DO UPDATE … WHERE the row existed at the read:
// an insert of a row missing at the read that finds a row another
// transaction committed since affects no row, a lost race
// (backend.ErrConflict), which backend.Loop retries. The transaction is two
// round trips: BEGIN goes with the locking read and the clock, COMMIT with
// the write (a write that fails skips the COMMIT behind it, and the
// transaction is rolled back). Get and List share-lock the rows they read (FOR
// SHARE) and take clock_timestamp() in the same implicit transaction, so
// nothing they show can change before their time is read.
//
// # Events between instances
//
// Notify and Listen (backend.Notifier) carry messages between the instances
// that share the database, on the NOTIFY channel Channel. When no Pub/Sub
// topic is set the service sends every change of holding through them, so
// that an acquire waiting on one instance starts at once when another ends
// the holding, and watch streams on every instance see every change.
//
// # Schema
//
// The table (default "leasesvc_leases") has the lease name as its primary
// key, in the "C" collation so that List's order is byte order, and an
// index on (expire_time, name) for the sweeper's ScanExpiry. Migrate
// creates both when missing (LEASESVC_POSTGRES_MIGRATE=true); without it
// start-up checks that the table has every column.
//
// A row holds the backend.Row it is given (lease.EncodeRow splits a lease
// record into one): the
// columns name, holder, fencing_token, ttl_ms, acquire_time, renew_time,
// expire_time, transitions, metadata and principal, and in the succession
// column (text, so that a checkpoint reads back byte for byte; named for
// its first content) backend.Row.Value, one JSON object of every other
// field of the record (revocation, succession state of docs/contract.md
// §8, checkpoint, reservation, deletion, session), empty for none. The
// package never names those fields: a new one changes no schema.
//
// Versions before the revocation joined that value kept it in the columns
// revoked_by and revoke_reason. They are read still (backend.Legacy: the
// value wins where it holds the revocation) and every write empties them,
// so a row's old revocation never outlives its next write. An instance of
// such a version (during a rolling upgrade, or after going back to one)
// reads a revocation written by this one as a holding that ended without
// one, and drops it if it writes the record.
package postgres
