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
// (backend.ErrConflict), which backend.Loop retries. Get and List share-lock the rows they read (FOR
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
package postgres
