package spanner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"

	"github.com/leasesvc/leasesvc/backend"
)

// DefaultBatchMax is how many operations one read-write transaction
// carries, at most, unless WithBatchMax says otherwise.
const DefaultBatchMax = 100

// BatchMaxLimit bounds WithBatchMax: a batch's write is about 12 mutations
// per lease (Spanner allows 80,000 per commit), and its read names every
// lease in one statement.
const BatchMaxLimit = 1000

// batcher is the Store's group commit: the attempts (Try calls) that arrive
// while a read-write transaction is in flight wait, and join the next one.
// One transaction is in flight at a time per Store; the first attempt on an
// idle Store starts at once, alone, as without batching. A batch holds
// distinct leases only (an attempt on a lease already in it waits for the
// next), at most max of them.
type batcher struct {
	s   *Store
	max int

	mu      sync.Mutex
	queue   []*op
	running bool // a goroutine runs batches until the queue is empty
}

// op is one attempt waiting for, or in, a batch.
type op struct {
	ctx  context.Context
	name string
	done chan result // buffered: the batcher never waits for the caller

	mu     sync.Mutex
	decide backend.Decide
	gone   bool // the caller stopped waiting: decide must not run any more

	answered bool // set by the batcher's goroutine only
}

// answer gives the caller its answer; the batcher answers each op once.
func (o *op) answer(r result) {
	o.answered = true
	o.done <- r
}

type result struct {
	snap backend.Snapshot
	err  error
}

// call runs the caller's decide, unless the caller has stopped waiting
// (its ctx ended): then decide, which may write to the caller's variables,
// must not run, and the answer is the ctx's error. A decide that panics
// fails its own attempt only (it runs on the batcher's goroutine, where a
// panic would stop the process).
func (o *op) call(snap backend.Snapshot) (next *backend.Record, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			next, err = nil, fmt.Errorf("spanner: update %q: decide panicked: %v", o.name, p)
		}
	}()
	if o.gone {
		if err := o.ctx.Err(); err != nil {
			return nil, err
		}
		return nil, context.Canceled
	}
	return o.decide(snap)
}

// do queues one attempt and waits for its own answer.
func (b *batcher) do(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	o := &op{ctx: ctx, name: name, decide: decide, done: make(chan result, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, o)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case r := <-o.done:
		return r.snap, r.err
	case <-ctx.Done():
	}
	o.mu.Lock()
	o.gone = true
	o.mu.Unlock()
	select {
	case r := <-o.done: // answered meanwhile: the answer stands
		return r.snap, r.err
	default:
		return backend.Snapshot{}, ctx.Err()
	}
}

// run runs batches until the queue is empty.
func (b *batcher) run() {
	for {
		b.mu.Lock()
		batch := b.take()
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		b.runSafely(batch)
	}
}

// runSafely runs a batch; if a decide panics, the callers of the batch
// that have no answer yet get an error, and the batcher goes on.
func (b *batcher) runSafely(batch []*op) {
	defer func() {
		if p := recover(); p != nil {
			for _, o := range batch {
				if !o.answered {
					o.answer(result{err: fmt.Errorf("spanner: a batched update panicked: %v", p)})
				}
			}
		}
	}()
	b.runBatch(batch)
}

// take removes the next batch from the queue: up to max attempts on
// distinct leases, in arrival order. An attempt whose caller is gone is
// answered (to nobody) and dropped. b.mu is held.
func (b *batcher) take() []*op {
	var (
		batch []*op
		rest  []*op
		names = map[string]bool{}
	)
	for _, o := range b.queue {
		switch {
		case o.ctx.Err() != nil:
			o.answer(result{err: o.ctx.Err()})
		case len(batch) < b.max && !names[o.name]:
			names[o.name] = true
			batch = append(batch, o)
		default:
			rest = append(rest, o)
		}
	}
	b.queue = rest
	return batch
}

// runBatch runs one batch and answers each of its attempts. A lone attempt
// is the Store's plain transaction. A batch whose transaction fails as a
// whole (a conflict the client did not retry, or an error one lease's
// write caused) is split: each attempt runs again alone, so that one
// lease's failure is its own answer only.
func (b *batcher) runBatch(batch []*op) {
	b.s.txns.Add(1)
	b.s.batched.Add(int64(len(batch)))
	if len(batch) == 1 {
		o := batch[0]
		snap, err := b.s.attempt(o.ctx, o.name, o.call)
		o.answer(result{snap, err})
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	results, err := b.s.transactBatch(ctx, batch)
	if err == nil {
		for i, o := range batch {
			o.answer(results[i])
		}
		return
	}
	b.s.splits.Add(1)
	for _, o := range batch {
		if o.ctx.Err() != nil {
			o.answer(result{err: o.ctx.Err()})
			continue
		}
		b.s.txns.Add(1)
		snap, err := b.s.attempt(o.ctx, o.name, o.call)
		o.answer(result{snap, err})
	}
}

// batchContext returns the context of a batch's transaction: done when
// every caller's context is done, with the latest of their deadlines.
func batchContext(batch []*op) (context.Context, context.CancelFunc) {
	var (
		latest time.Time
		all    = true
	)
	for _, o := range batch {
		d, ok := o.ctx.Deadline()
		if !ok {
			all = false
		} else if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if all {
		ctx, cancel = context.WithDeadline(context.Background(), latest)
	}
	var (
		mu   sync.Mutex
		live = len(batch)
		stop []func() bool
	)
	for _, o := range batch {
		stop = append(stop, context.AfterFunc(o.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if live--; live == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, s := range stop {
			s()
		}
		cancel()
	}
}

// batchColumns are the columns a batch reads for each lease: the record's,
// and UpdateTime, the commit timestamp of the write the row shows, so that
// no decision precedes it.
var batchColumns = append(strings.Split(recordColumns, ", "), "UpdateTime")

// readRows reads the rows of names by primary key (a point read of each
// key, which inside the read-write transaction locks every key named,
// present or not; absent rows are simply not returned), then
// CURRENT_TIMESTAMP() in the same transaction. It returns the records by
// name, that time, and the rows' commit timestamps by name. (One SQL
// statement with Name IN UNNEST(@names), as a lone attempt reads its row,
// is a scan of the whole table on the emulator: 140 ms for a batch of 58
// in a table of a few thousand rows, where the point reads take 1 ms.)
func readRows(ctx context.Context, tx *spanner.ReadWriteTransaction, names []string) (map[string]*backend.Record, time.Time, map[string]time.Time, error) {
	keys := make([]spanner.Key, len(names))
	for i, n := range names {
		keys[i] = spanner.Key{n}
	}
	recs := make(map[string]*backend.Record, len(names))
	updated := make(map[string]time.Time, len(names))
	err := tx.Read(ctx, Table, spanner.KeySetFromKeys(keys...), batchColumns).Do(func(row *spanner.Row) error {
		var r leaseRow
		if err := row.ToStructLenient(&r); err != nil {
			return fmt.Errorf("decode a lease row: %w", err)
		}
		var u time.Time
		if err := row.ColumnByName("UpdateTime", &u); err != nil {
			return fmt.Errorf("decode a lease row's UpdateTime: %w", err)
		}
		rec, err := r.record()
		if err != nil {
			return err
		}
		recs[r.Name], updated[r.Name] = rec, u
		return nil
	})
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	it := tx.Query(ctx, spanner.Statement{SQL: "SELECT CURRENT_TIMESTAMP()"})
	defer it.Stop()
	row, err := it.Next()
	if errors.Is(err, iterator.Done) {
		return nil, time.Time{}, nil, errors.New("SELECT CURRENT_TIMESTAMP() returned no row")
	}
	if err != nil {
		return nil, time.Time{}, nil, err
	}
	var now time.Time
	if err := row.Columns(&now); err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("decode CURRENT_TIMESTAMP(): %w", err)
	}
	return recs, now, updated, nil
}

// transactBatch runs the attempts of batch in one read-write transaction:
// one read of every row at one server time, each attempt's own decide on
// its own row, the writes of those that changed something, one commit. The
// decision time of each lease is CURRENT_TIMESTAMP(), or its row's commit
// timestamp when that is later, as for a lone attempt. An attempt whose
// decide fails, or whose record cannot be written, gets that error as its
// answer and writes nothing; the others are unaffected. err is the
// transaction's own failure (the client may have run the function more
// than once; only the last run's answers count).
func (s *Store) transactBatch(ctx context.Context, batch []*op) (results []result, err error) {
	names := make([]string, len(batch))
	for i, o := range batch {
		names[i] = o.name
	}
	_, err = s.client.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		results = make([]result, len(batch))
		recs, now, updated, err := readRows(ctx, tx, names)
		if err != nil {
			return err
		}
		var ms []*spanner.Mutation
		for i, o := range batch {
			at := now
			if u, ok := updated[o.name]; ok && u.After(at) {
				at = u
			}
			snap := backend.Snapshot{Record: recs[o.name], ServerTime: at}
			next, err := o.call(snap)
			switch {
			case err != nil:
				results[i] = result{snap: snap, err: err} // decide's error, unchanged
				continue
			case next == nil:
				results[i] = result{snap: snap}
				continue
			}
			m, written, err := writeMutation(o.name, next)
			if err != nil {
				results[i] = result{err: fmt.Errorf("spanner: update %q: %w", o.name, err)}
				continue
			}
			ms = append(ms, m)
			snap.Record = written
			results[i] = result{snap: snap}
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	}, s.txOptions())
	if err != nil {
		return nil, classify(fmt.Sprintf("update %d leases in one transaction", len(batch)), err)
	}
	return results, nil
}
