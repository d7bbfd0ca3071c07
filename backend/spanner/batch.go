package spanner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"

	"github.com/leasesvc/leasesvc/backend"
)

// DefaultBatchMax is how many operations one read-write transaction
// carries, at most, unless WithBatchMax says otherwise: the Store declares
// it as its Hints.MaxBatch, and backend.Loop batches (see
// backend.BatchStore).
const DefaultBatchMax = 100

// BatchMaxLimit bounds WithBatchMax: a batch's write is about 12 mutations
// per lease (Spanner allows 80,000 per commit), and its read names every
// lease in one statement.
const BatchMaxLimit = 1000

// batchColumns are the columns a batch reads for each lease: the record's,
// and UpdateTime, the commit timestamp of the write the row shows, so that
// no decision precedes it.
var batchColumns = append(slices.Clone(recordColumnList), "UpdateTime")

// readRows reads CURRENT_TIMESTAMP(), then the rows of names by primary
// key in the same transaction (a point read of each key, which inside the
// read-write transaction locks every key named, present or not; absent
// rows are simply not returned). It returns the rows by name, that time,
// and the rows' commit timestamps by name.
//
// The clock is read first. A decision is made at that time or at the row's
// commit timestamp, whichever is later, on the row as the read found it,
// and the row was current from its commit until the read: so the decision
// time is always one at which the row was as read. Read the other way
// round, a read whose answer was delayed (a slow link to the database)
// paired a row with a later clock, and a refusal (lease_held, which writes
// nothing and so is never checked at commit) showed a holding live after
// its release had committed: the emulator safety run caught one, a
// holding "live" 0.4 ms after the next token began. (One SQL statement
// with Name IN UNNEST(@names), as a lone attempt reads its row, is a scan
// of the whole table on the emulator: 140 ms for a batch of 58 in a table
// of a few thousand rows, where the point reads take 1 ms.)
func readRows(ctx context.Context, tx *spanner.ReadWriteTransaction, names []string) (map[string]*backend.Row, time.Time, map[string]time.Time, error) {
	now, err := currentTimestamp(ctx, tx)
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	keys := make([]spanner.Key, len(names))
	for i, n := range names {
		keys[i] = spanner.Key{n}
	}
	recs := make(map[string]*backend.Row, len(names))
	updated := make(map[string]time.Time, len(names))
	err = tx.Read(ctx, Table, spanner.KeySetFromKeys(keys...), batchColumns).Do(func(row *spanner.Row) error {
		var r leaseRow
		if err := row.ToStructLenient(&r); err != nil {
			return fmt.Errorf("decode a lease row: %w", err)
		}
		var u time.Time
		if err := row.ColumnByName("UpdateTime", &u); err != nil {
			return fmt.Errorf("decode a lease row's UpdateTime: %w", err)
		}
		recs[r.Name], updated[r.Name] = r.row(), u
		return nil
	})
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	return recs, now, updated, nil
}

// currentTimestamp reads CURRENT_TIMESTAMP() in tx.
func currentTimestamp(ctx context.Context, tx *spanner.ReadWriteTransaction) (time.Time, error) {
	it := tx.Query(ctx, spanner.Statement{SQL: "SELECT CURRENT_TIMESTAMP()"})
	defer it.Stop()
	row, err := it.Next()
	if errors.Is(err, iterator.Done) {
		return time.Time{}, errors.New("SELECT CURRENT_TIMESTAMP() returned no row")
	}
	if err != nil {
		return time.Time{}, err
	}
	var now time.Time
	if err := row.Columns(&now); err != nil {
		return time.Time{}, fmt.Errorf("decode CURRENT_TIMESTAMP(): %w", err)
	}
	return now, nil
}

// TryBatch implements backend.BatchStore: the attempts in one read-write
// transaction, one read of every row at one server time, each attempt's
// own decide on its own row, the writes of those that changed something,
// one commit. The decision time of each lease is CURRENT_TIMESTAMP(), or
// its row's commit timestamp when that is later, as for a lone attempt. An
// attempt whose decide fails, or whose record cannot be written, gets that
// error as its Result and writes nothing; the others are unaffected. err is
// the transaction's own failure (the client may have run the function more
// than once; only the last run's answers count).
func (s *Store) TryBatch(ctx context.Context, attempts []backend.Attempt) (results []backend.Result, err error) {
	if s.cfg.batchMax > 1 {
		s.txns.Add(1)
		s.batched.Add(int64(len(attempts)))
	}
	names := make([]string, len(attempts))
	for i, a := range attempts {
		names[i] = a.Name
	}
	_, err = s.client.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		results = make([]backend.Result, len(attempts))
		recs, now, updated, err := readRows(ctx, tx, names)
		if err != nil {
			return err
		}
		var ms []*spanner.Mutation
		for i, a := range attempts {
			at := now
			if u, ok := updated[a.Name]; ok && u.After(at) {
				at = u
			}
			snap := backend.Snapshot{Row: recs[a.Name], ServerTime: at}
			next, err := a.Decide(snap)
			switch {
			case err != nil:
				results[i] = backend.Result{Snapshot: snap, Err: err} // decide's error, unchanged
				continue
			case next == nil:
				results[i] = backend.Result{Snapshot: snap}
				continue
			}
			m, written, err := writeMutation(a.Name, next)
			if err != nil {
				results[i] = backend.Result{Err: fmt.Errorf("spanner: update %q: %w", a.Name, err)}
				continue
			}
			ms = append(ms, m)
			snap.Row = written
			results[i] = backend.Result{Snapshot: snap}
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	}, s.txOptions())
	if err != nil {
		if s.cfg.batchMax > 1 {
			s.splits.Add(1)
		}
		return nil, classify(fmt.Sprintf("update %d leases in one transaction", len(attempts)), err)
	}
	return results, nil
}
