package backend

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// batcher is Loop's group commit over a BatchStore: the attempts that
// arrive while a transaction is in flight wait, and join the next one. One
// transaction is in flight at a time per Loop; the first attempt on an idle
// Loop starts at once, alone, with Store.Try, as without batching. A batch
// holds distinct names only (an attempt on a name already in it waits for
// the next), at most max of them.
type batcher struct {
	store BatchStore
	max   int

	mu      sync.Mutex
	queue   []*op
	running bool // a goroutine runs batches until the queue is empty

	attempts, txns, splits atomic.Int64 // see Loop.BatchStats
}

// op is one attempt waiting for, or in, a batch.
type op struct {
	ctx  context.Context
	name string
	done chan Result // buffered: the batcher never waits for the caller

	mu     sync.Mutex
	decide Decide
	gone   bool // the caller stopped waiting: decide must not run any more

	answered bool // set by the batcher's goroutine only
}

// answer gives the caller its answer; the batcher answers each op once.
func (o *op) answer(r Result) {
	o.answered = true
	o.done <- r
}

// call runs the caller's decide, unless the caller has stopped waiting
// (its ctx ended): then decide, which may write to the caller's variables,
// must not run, and the answer is the ctx's error. A decide that panics
// fails its own attempt only (it runs on the batcher's goroutine, where a
// panic would stop the process).
func (o *op) call(snap Snapshot) (next *Row, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			next, err = nil, fmt.Errorf("backend: update %q: decide panicked: %v", o.name, p)
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

// do queues one attempt and waits for its own answer. On an idle batcher
// the attempt runs at once on the caller's goroutine, alone, with no
// hand-off to the batcher's (about 0.1–0.3 ms on a loaded machine,
// docs/spanner.md#per-operation-cost); the attempts that arrive meanwhile
// queue, and the batcher's goroutine starts for them when it ends.
func (b *batcher) do(ctx context.Context, name string, decide Decide) (Snapshot, error) {
	b.mu.Lock()
	if !b.running {
		b.running = true
		b.mu.Unlock()
		defer b.idle()
		b.txns.Add(1)
		b.attempts.Add(1)
		return b.store.Try(ctx, name, decide)
	}
	o := &op{ctx: ctx, name: name, decide: decide, done: make(chan Result, 1)}
	b.queue = append(b.queue, o)
	b.mu.Unlock()
	select {
	case r := <-o.done:
		return r.Snapshot, r.Err
	case <-ctx.Done():
	}
	o.mu.Lock()
	o.gone = true
	o.mu.Unlock()
	select {
	case r := <-o.done: // answered meanwhile: the answer stands
		return r.Snapshot, r.Err
	default:
		return Snapshot{}, ctx.Err()
	}
}

// idle ends an attempt run on its caller's goroutine: the batcher's
// goroutine takes over the attempts that queued meanwhile, if any.
func (b *batcher) idle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.running = false
		return
	}
	go b.run()
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

// runSafely runs a batch; if it panics (the driver, or a decide the driver
// called outside op.call), the callers of the batch that have no answer
// yet get an error, and the batcher goes on.
func (b *batcher) runSafely(batch []*op) {
	defer func() {
		if p := recover(); p != nil {
			for _, o := range batch {
				if !o.answered {
					o.answer(Result{Err: fmt.Errorf("backend: a batched update panicked: %v", p)})
				}
			}
		}
	}()
	b.runBatch(batch)
}

// take removes the next batch from the queue: up to max attempts on
// distinct names, in arrival order. An attempt whose caller is gone is
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
			o.answer(Result{Err: o.ctx.Err()})
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
// (one that queued alone behind a transaction) is the Store's plain Try. A batch whose transaction fails as a whole is
// split: each attempt runs again alone, so that one lease's failure is its
// own answer only.
func (b *batcher) runBatch(batch []*op) {
	b.txns.Add(1)
	b.attempts.Add(int64(len(batch)))
	if len(batch) == 1 {
		b.alone(batch[0])
		return
	}
	attempts := make([]Attempt, len(batch))
	for i, o := range batch {
		attempts[i] = Attempt{Name: o.name, Decide: o.call}
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	results, err := b.store.TryBatch(ctx, attempts)
	if err == nil && len(results) == len(batch) {
		for i, o := range batch {
			o.answer(results[i])
		}
		return
	}
	b.splits.Add(1)
	for _, o := range batch {
		if o.ctx.Err() != nil {
			o.answer(Result{Err: o.ctx.Err()})
			continue
		}
		b.txns.Add(1)
		b.alone(o)
	}
}

// alone makes o's attempt by itself with Store.Try and answers it.
func (b *batcher) alone(o *op) {
	snap, err := b.store.Try(o.ctx, o.name, o.call)
	o.answer(Result{Snapshot: snap, Err: err})
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

// Batcher is a group commit that several Loops over one store share
// (WithBatcher): one transaction at a time then leaves the process for that
// store, however many Loops drive it, as when the service's lease.Manager
// and its proof-key issuer drive one Store, or a test runs several Managers
// over one emulator, which fails a transaction that another interrupts. A
// Loop given none has a batcher of its own. The zero value is ready to use;
// a Batcher serves the Loops of one store with one batch limit (the first
// Loop's): NewLoop panics for a Loop over another.
type Batcher struct {
	mu sync.Mutex
	b  *batcher // made by the first Loop
}

// NewBatcher returns a Batcher for the Loops to share (WithBatcher).
func NewBatcher() *Batcher { return new(Batcher) }

// bind returns the batcher of the Loops given sb, making it for s and max
// at the first.
func (sb *Batcher) bind(s BatchStore, max int) *batcher {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.b == nil {
		sb.b = &batcher{store: s, max: max}
		return sb.b
	}
	if !sameStore(sb.b.store, s) || sb.b.max != max {
		panic(fmt.Sprintf("backend: NewLoop: the Batcher serves a %T with MaxBatch %d; this Loop drives a %T with MaxBatch %d", sb.b.store, sb.b.max, s, max))
	}
	return sb.b
}

// sameStore reports whether a and b are the same store; a store whose type
// cannot be compared is never the same as another.
func sameStore(a, b BatchStore) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}
