package spanner

import "github.com/leasesvc/leasesvc/backend"

// FastPath says when an Update decides on a strong single read before its
// read-write transaction: backend.ReadFirst, which backend.Loop carries out.
// The read answers refusals (lease_held, lease_lost, an idempotent release)
// without a transaction or locks, so followers polling a held lease never
// contend with its holder; an answer that writes pays for the read on top
// of the transaction.
type FastPath = backend.ReadFirst

const (
	// FastPathAdaptive reads first when the previous Update of the same
	// lease in this process wrote nothing, and goes straight to the
	// transaction otherwise, or when a waiting acquire was woken because
	// the holding may have ended. The default.
	FastPathAdaptive = backend.ReadFirstAdaptive
	// FastPathAlways reads first on every Update.
	FastPathAlways = backend.ReadFirstAlways
	// FastPathNever never reads first: refusals are decided inside the
	// read-write transaction.
	FastPathNever = backend.ReadFirstNever
)

// ParseFastPath reads "adaptive", "always" or "never".
func ParseFastPath(s string) (FastPath, error) { return backend.ParseReadFirst(s) }
