// Package lease holds the rules of leasesvc: named, time-bounded,
// fencing-token-guarded rights to lead (docs/contract.md §1–3).
//
// A Manager applies the rules over a backend.Store, a compare-and-set store
// that supplies its own server time. Every decision (is the lease expired? is
// this renew still valid?) is made with the backend's clock, on the snapshot
// the decision is written against; the Manager never reads a clock of its
// own.
//
// The package owns the lease's type, Record, and its codec: EncodeRow
// splits a Record into the backend.Row a driver stores (a few columns and
// one encoded value) and DecodeRow joins it back, in one place around every
// decision (records.go), so no driver knows a field of the lease beyond its
// columns, and a new field changes this package only.
//
// # Guarantees
//
// Fencing tokens strictly increase by one with every new holding of a lease
// and are never reused, as long as the backend keeps its records (the memory
// backend forgets everything when its process ends). Two holdings of one
// lease never overlap in server time: the earlier holding's final expireTime
// is at or before the later one's acquireTime.
//
// # Limits
//
// A lease protects nothing by itself. A holder that pauses (GC, swap, a
// suspended VM) past its expiry can still act after another holder took
// over; a holder must stop at its safe deadline, measured on its own
// monotonic clock from the moment it sent the acquire or renew (docs/contract.md §2), and
// downstream systems must refuse writes that carry a fencing token lower than
// one they have already seen.
package lease
