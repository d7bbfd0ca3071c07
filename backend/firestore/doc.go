// Package firestore is the Cloud Firestore lease backend: a backend.Store
// that keeps one document per lease and decides on Firestore's clock.
//
// # Data model
//
// Every lease is one document in one collection (default "leases"); its
// document ID is the lease name. Lease names ([A-Za-z0-9][A-Za-z0-9._-]*,
// at most 128 characters) are always valid document IDs: they contain no
// "/", are never "." or "..", and never match the reserved __.*__ form. A
// document holds the backend.Row it is given (lease.EncodeRow splits a
// lease record into one):
// the fields name, holder, fencingToken, ttlMs, acquireTime, renewTime,
// expireTime (timestamps, microsecond precision; the sweeper's query orders
// by expireTime), transitions, metadata (the JSON object as a string, ""
// for none, so it round-trips byte for byte) and principal (when set); and
// succession, one JSON string, backend.Row.Value, that holds every other
// field of the record (revocation, succession state of docs/contract.md §8,
// checkpoint, reservation, deletion, session), absent when there is none.
// The package never names those fields: a new one changes no document.
//
// Versions before the revocation joined that value kept it in the fields
// revokedBy and revokeReason. They are read still (backend.Legacy: the value
// wins where it holds the revocation) and deleted from a document at its
// next write; nothing writes them now. An instance of such a version (during
// a rolling upgrade, or after going back to one) reads a revocation written
// by this one as a holding that ended without one, and drops it if it writes
// the record.
//
// # Clock
//
// The time that decides is the read time of the snapshot the decision is made
// on (DocumentSnapshot.ReadTime, which Firestore returns for missing
// documents too). The stored acquire, renew and expire times derive from that
// read time. The package never reads the local clock to decide anything; it
// uses timers only to pace its retries.
//
// # Try
//
// Try, one attempt, reads the document with a plain Get (no transaction, no
// lock), calls decide with it and writes the decision with a precondition:
// Create when the document was missing (it fails if someone created it
// since), otherwise an update conditioned on the update time the decision
// saw. A failed precondition is a lost race (backend.ErrConflict), which
// backend.Loop retries with backoff; the Loop also sends one attempt per
// lease at a time from a process, which spares Firestore the burst of
// doomed writes when many requests see a lease fall free at once, and
// answers refusals from a read first (Hints). The precondition alone keeps
// every attempt correct.
//
// The decision's read time is at or before the commit, and the precondition
// guarantees that nothing changed in between, so a decision holds at commit
// time as it did at read time: a lease seen expired at the read is still
// expired at the commit, and a new holding's acquireTime (the read time) is
// at or after the previous holding's expireTime.
//
// # Contention
//
// An acquire of a lease that is visibly held by another holder is refused
// on the plain read: it takes no lock and writes nothing, so any number of
// contenders polling a held lease cost its holder nothing beyond the reads
// they are billed for. Firestore transactions would serialize them behind
// document locks (on the emulator, eight concurrent transactional writers of
// one document showed a 10 s p99).
//
// # Limits
//
// The Firestore client retries Unavailable errors within each call for as
// long as the call's context allows, so an unreachable Firestore does not
// fail fast: each call (read, write, query) is bounded by the Store's call
// timeout (WithCallTimeout, default 10 s), after which it fails with
// backend.ErrUnavailable while the caller's ctx is still live. A write whose
// answer is lost may have been applied: the next attempt sees it on
// the next read and decides again on it, which the lease rules make
// harmless (a holder's repeated acquire is idempotent).
package firestore
