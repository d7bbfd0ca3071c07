package backend

import (
	"context"
	"fmt"
	"strconv"
)

// Attempt is one attempt of a batch (see BatchStore): an update of the
// row under Name decided by Decide, as Store.Try makes alone.
type Attempt struct {
	// Name is the lease name.
	Name string
	// Decide decides this attempt, on this row only.
	Decide Decide
}

// Result is the answer to one Attempt of a batch: what Store.Try would have
// returned for it alone.
type Result struct {
	// Snapshot is the snapshot decide's answer produced.
	Snapshot Snapshot
	// Err is the attempt's own error: decide's (unchanged), or one its
	// row alone caused; nil on success.
	Err error
}

// BatchStore is implemented by a Store that can make several attempts, on
// distinct leases, in one transaction, as gocloud.dev's pubsub drivers send
// several messages in one call. The driver only declares the batch limit
// (Hints.MaxBatch) and makes a batch's attempts; the queueing, the
// splitting of a failed batch, the recovery of a panicking decide and the
// answer of each caller live in Loop, for every driver.
type BatchStore interface {
	Store
	// TryBatch makes the attempts, on distinct names, in one transaction:
	// one read of every row at one server time, each attempt's decide
	// on its own row, the writes of those that changed something, one
	// commit. It returns one Result per attempt, in order, each as Try
	// would have answered it alone (a decide's error, or a row that
	// cannot be written, is that attempt's Result and writes nothing of
	// it). err is the transaction's failure as a whole (a lost race, an
	// unreachable backend): then nothing was written, and Loop makes each
	// attempt again alone with Try. A decide may be called more than once
	// (the transaction may be run again); only the last answer counts.
	TryBatch(ctx context.Context, attempts []Attempt) (results []Result, err error)
}

// EnvBatchMax reads a backend's batch limit setting (Hints.MaxBatch): a
// whole number from 1 (no batching) to limit; unset is def. An error names
// the variable.
func EnvBatchMax(getenv func(string) string, key string, def, limit int) (int, error) {
	v := getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > limit {
		return 0, fmt.Errorf("%s=%q: must be a whole number from 1 (no batching) to %d", key, v, limit)
	}
	return n, nil
}
