package backend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/backendtest"
	"github.com/leasesvc/leasesvc/backend/memory"
)

// fakeBatch is a BatchStore over the memory store: TryBatch makes the
// attempts one after the other (the memory store has no transaction to
// share), records each batch's names, and fails as a whole or panics as
// told.
type fakeBatch struct {
	*memory.Store
	max int

	mu      sync.Mutex
	batches [][]string
	fail    error // the next TryBatch fails as a whole with it
	panics  bool  // the next TryBatch panics
}

func (f *fakeBatch) Hints() backend.Hints { return backend.Hints{MaxBatch: f.max} }

func (f *fakeBatch) TryBatch(ctx context.Context, attempts []backend.Attempt) ([]backend.Result, error) {
	f.mu.Lock()
	var names []string
	for _, a := range attempts {
		names = append(names, a.Name)
	}
	f.batches = append(f.batches, names)
	fail, panics := f.fail, f.panics
	f.fail, f.panics = nil, false
	f.mu.Unlock()
	if panics {
		panic("a bug in the driver")
	}
	if fail != nil {
		return nil, fail // a transaction that did not commit wrote nothing: the loop runs each again alone
	}
	results := make([]backend.Result, len(attempts))
	for i, a := range attempts {
		snap, err := f.Store.Try(ctx, a.Name, a.Decide)
		results[i] = backend.Result{Snapshot: snap, Err: err}
	}
	return results, nil
}

// hold starts an Update of name through l whose decide blocks until the
// returned release is called; it returns once that attempt is in the
// batcher's hands, and release waits for its answer.
func hold(t *testing.T, l *backend.Loop, name string) (release func()) {
	t.Helper()
	entered, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := l.Update(t.Context(), name, func(s backend.Snapshot) (*backend.Row, error) {
			once.Do(func() { close(entered) })
			<-unblock
			return write(s)
		})
		done <- err
	}()
	<-entered
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Errorf("the blocking Update: %v", err)
		}
	}
}

// queue starts Updates through l, each on its own name with its own
// decide, and waits until all of them wait in the batcher; wait returns
// their answers.
func queue(t *testing.T, l *backend.Loop, names []string, decides []backend.Decide) (wait func() ([]backend.Snapshot, []error)) {
	t.Helper()
	snaps, errs := make([]backend.Snapshot, len(names)), make([]error, len(names))
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() { snaps[i], errs[i] = l.Update(t.Context(), names[i], decides[i]) })
	}
	for backend.BatchQueued(l) < len(names) {
		time.Sleep(time.Millisecond) // polling a condition, not a guess
	}
	return func() ([]backend.Snapshot, []error) { wg.Wait(); return snaps, errs }
}

// TestLoopBatchAnswersEachCaller: the attempts that arrive while a batch
// is in flight share the next one, on distinct names, and each caller gets
// its own answer: a write, decide's own error, nothing written, a decide
// that panics (its own error only).
func TestLoopBatchAnswersEachCaller(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 50}
	l := backend.NewLoop(f)
	release := hold(t, l, "blocker")
	refused := errors.New("refused")
	names := []string{"w1", "w2", "w3", "refused", "unchanged", "panics"}
	wait := queue(t, l, names, []backend.Decide{write, write, write,
		func(backend.Snapshot) (*backend.Row, error) { return nil, refused },
		refuse,
		func(backend.Snapshot) (*backend.Row, error) { panic("a bug in decide") },
	})
	release()
	snaps, errs := wait()

	if len(f.batches) != 1 || len(f.batches[0]) != len(names) {
		t.Fatalf("batches %v, want one of the %d queued attempts (the blocker went alone, by Try)", f.batches, len(names))
	}
	for i := range 3 {
		if errs[i] != nil || snaps[i].Row == nil || snaps[i].Row.FencingToken != 1 {
			t.Errorf("write %s = %+v, %v; want token 1", names[i], snaps[i].Row, errs[i])
		}
	}
	if errs[3] != refused {
		t.Errorf("refused = %v, want decide's own error", errs[3])
	}
	if errs[4] != nil || snaps[4].Row != nil {
		t.Errorf("unchanged = %+v, %v; want no record, no error", snaps[4].Row, errs[4])
	}
	if errs[5] == nil || !strings.Contains(errs[5].Error(), "decide panicked: a bug in decide") {
		t.Errorf("panicking decide = %v, want an error saying so", errs[5])
	}
	if attempts, txns, splits := l.BatchStats(); attempts != 7 || txns != 2 || splits != 0 {
		t.Errorf("BatchStats = %d, %d, %d; want 7 attempts in 2 transactions, no split", attempts, txns, splits)
	}
}

// TestLoopBatchSplitsAFailedBatch: a batch that fails as a whole is split,
// each attempt made again alone, so every caller gets its own answer.
func TestLoopBatchSplitsAFailedBatch(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 50}
	f.fail = errors.New("the transaction failed")
	l := backend.NewLoop(f)
	release := hold(t, l, "blocker")
	names := []string{"a", "b", "c"}
	wait := queue(t, l, names, []backend.Decide{write, write, write})
	release()
	snaps, errs := wait()
	for i, n := range names {
		if errs[i] != nil || snaps[i].Row == nil || snaps[i].Row.FencingToken != 1 {
			t.Errorf("%s = %+v, %v; want its own attempt alone", n, snaps[i].Row, errs[i])
		}
	}
	if _, txns, splits := l.BatchStats(); splits != 1 || txns != 1+1+3 {
		t.Errorf("BatchStats: %d transactions, %d splits; want 5 (blocker, batch, 3 alone) and 1", txns, splits)
	}
}

// TestLoopBatchSurvivesADriverPanic: a TryBatch that panics answers each
// of its callers with an error, and the batcher goes on.
func TestLoopBatchSurvivesADriverPanic(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 50, panics: true}
	l := backend.NewLoop(f)
	release := hold(t, l, "blocker")
	wait := queue(t, l, []string{"a", "b"}, []backend.Decide{write, write})
	release()
	_, errs := wait()
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "a batched update panicked") {
			t.Errorf("attempt in a panicking batch = %v, want an error saying so", err)
		}
	}
	if _, err := l.Update(t.Context(), "a", write); err != nil {
		t.Fatalf("Update after the panic: %v", err)
	}
}

// TestLoopBatchLimitAndCancel: a batch takes at most MaxBatch attempts;
// a caller whose context ends while queued gets its context's error and its
// decide never runs.
func TestLoopBatchLimitAndCancel(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 2}
	l := backend.NewLoop(f)
	release := hold(t, l, "blocker")
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	ran := make(chan struct{}, 1)
	go func() {
		_, err := l.Update(ctx, "gone", func(s backend.Snapshot) (*backend.Row, error) { ran <- struct{}{}; return write(s) })
		gone <- err
	}()
	for backend.BatchQueued(l) < 1 {
		time.Sleep(time.Millisecond)
	}
	var names []string
	var decides []backend.Decide
	for i := range 5 {
		names, decides = append(names, fmt.Sprint("n", i)), append(decides, write)
	}
	wait := queue(t, l, names, decides)
	cancel()
	if err := <-gone; err != context.Canceled {
		t.Fatalf("cancelled caller = %v, want context.Canceled", err)
	}
	release()
	_, errs := wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	select {
	case <-ran:
		t.Error("the decide of a caller that had gone ran")
	default:
	}
	for _, b := range f.batches {
		if len(b) > 2 {
			t.Errorf("batch %v holds more than MaxBatch 2", b)
		}
	}
}

// TestLoopBatchOff: a BatchStore with MaxBatch ≤ 1, or a Loop told
// WithMaxBatch(1), never batches.
func TestLoopBatchOff(t *testing.T) {
	for _, l := range []*backend.Loop{
		backend.NewLoop(&fakeBatch{Store: memory.New(), max: 1}),
		backend.NewLoop(&fakeBatch{Store: memory.New(), max: 50}, backend.WithMaxBatch(1)),
	} {
		if _, err := l.Update(t.Context(), "a", write); err != nil {
			t.Fatal(err)
		}
		if a, _, _ := l.BatchStats(); a != 0 {
			t.Errorf("%d batched attempts, want none", a)
		}
	}
}

// TestConformanceBatched runs the conformance suite over the memory store
// behind the fake BatchStore, so that the loop's batch path serves every
// rule of the contract in go test ./backend/..., not only on the
// emulators.
func TestConformanceBatched(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		clock := memory.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		return backendtest.Harness{Store: &fakeBatch{Store: memory.New(memory.WithClock(clock.Now)), max: 100}, Advance: clock.Advance}
	}, backendtest.Options{})
}

// TestLoopBatchShared: two Loops given one Batcher share it, so one
// transaction at a time leaves them for their store: an attempt through the
// second waits behind one through the first and joins the next batch.
func TestLoopBatchShared(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 50}
	shared := backend.NewBatcher()
	first, second := backend.NewLoop(f, backend.WithBatcher(shared)), backend.NewLoop(f, backend.WithBatcher(shared))
	release := hold(t, first, "blocker")
	wait := queue(t, second, []string{"a", "b"}, []backend.Decide{write, write})
	release()
	if _, errs := wait(); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if len(f.batches) != 1 || len(f.batches[0]) != 2 {
		t.Fatalf("batches %v, want the two attempts of the second Loop in one", f.batches)
	}
	if a1, _, _ := first.BatchStats(); a1 != 3 {
		t.Errorf("the shared batcher ran %d attempts, want 3 (the blocker and the two of the second Loop)", a1)
	}
}

// TestLoopBatchOwnByDefault: Loops over one store given no Batcher each
// have their own (no state shared in the process): the attempts queued
// behind a transaction of the first are not in the second's queue.
func TestLoopBatchOwnByDefault(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 50}
	first, second := backend.NewLoop(f), backend.NewLoop(f)
	release := hold(t, first, "blocker")
	wait := queue(t, first, []string{"a", "b"}, []backend.Decide{write, write})
	if n := backend.BatchQueued(second); n != 0 {
		t.Errorf("the second Loop's batcher holds %d queued attempts of the first's, want 0: its own", n)
	}
	release()
	if _, errs := wait(); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if a, _, _ := second.BatchStats(); a != 0 {
		t.Errorf("the second Loop's batcher ran %d attempts, want none", a)
	}
}

// TestLoopBatcherOneStore: a Batcher serves the Loops of one store with one
// batch limit; NewLoop refuses (panics) to give it to a Loop over another
// or with another limit, whose attempts would go to the wrong store.
func TestLoopBatcherOneStore(t *testing.T) {
	f := &fakeBatch{Store: memory.New(), max: 50}
	shared := backend.NewBatcher()
	backend.NewLoop(f, backend.WithBatcher(shared))
	for what, build := range map[string]func(){
		"another store": func() { backend.NewLoop(&fakeBatch{Store: memory.New(), max: 50}, backend.WithBatcher(shared)) },
		"another limit": func() { backend.NewLoop(f, backend.WithBatcher(shared), backend.WithMaxBatch(10)) },
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "the Batcher serves") {
					t.Errorf("NewLoop with the Batcher of %s: panic %v, want one saying so", what, p)
				}
			}()
			build()
		}()
	}
	off := backend.NewLoop(f, backend.WithBatcher(shared), backend.WithMaxBatch(1)) // batching off: the Batcher is ignored
	if _, err := off.Update(t.Context(), "a", write); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := off.BatchStats(); a != 0 {
		t.Errorf("a Loop with batching off, given the Batcher, batched %d attempts; want none", a)
	}
}
