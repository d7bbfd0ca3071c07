package backendtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// increment is the decide of an increment of name: the row of a sample
// record whose token is one above the token of the row it read.
func increment(name string) backend.Decide {
	return func(s backend.Snapshot) (*backend.Row, error) {
		r := sampleRecord(name, s.ServerTime)
		r.FencingToken = 1
		if s.Row != nil {
			r.FencingToken = s.Row.FencingToken + 1
		}
		row, err := lease.EncodeRow(r)
		return &row, err
	}
}

// testBatchedUpdates runs Updates of distinct names through one Loop at
// once, round after round, next to Updates whose decide fails or writes
// nothing: over a BatchStore with a batch limit the Loop hands the ones
// that arrive while a transaction is in flight to TryBatch together, and
// every caller still gets its own answer, as alone. On any other store it
// is the plain path, with the same answers.
func testBatchedUpdates(t *testing.T, e *env) {
	const names, rounds = 12, 3
	boom := errors.New("boom")
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		for i := range names {
			name := e.name(fmt.Sprintf("n%02d", i))
			wg.Go(func() {
				snap, err := e.loop.Update(t.Context(), name, increment(name))
				if err != nil || snap.Row == nil || snap.Row.FencingToken != int64(round) {
					t.Errorf("round %d: increment of %s = %+v, %v; want token %d", round, name, snap.Row, err, round)
				}
			})
		}
		wg.Go(func() {
			if _, err := e.loop.Update(t.Context(), e.name("fails"), func(backend.Snapshot) (*backend.Row, error) { return nil, boom }); err != boom {
				t.Errorf("round %d: Update whose decide fails = %v, want decide's error unchanged", round, err)
			}
		})
		wg.Go(func() {
			snap, err := e.loop.Update(t.Context(), e.name("unchanged"), func(backend.Snapshot) (*backend.Row, error) { return nil, nil })
			if err != nil || snap.Row != nil || snap.ServerTime.IsZero() {
				t.Errorf("round %d: Update that writes nothing = %+v, %v; want no record at a server time", round, snap, err)
			}
		})
		wg.Wait()
	}
	for _, n := range []string{"fails", "unchanged"} {
		if got, err := e.Store.Get(t.Context(), e.name(n)); err != nil || got.Row != nil {
			t.Errorf("%s: %+v, %v; want no record", n, got.Row, err)
		}
	}
	attempts, txns, splits := e.loop.BatchStats()
	t.Logf("batched %d attempts in %d transactions (%d split)", attempts, txns, splits)
}

// testTryBatch checks TryBatch of a BatchStore (Run leaves it out for a
// store that is not one): each attempt is answered as Try would have, in order; a
// decide's error is returned unchanged and writes nothing, as does a
// decide that returns nil; the writes land.
func testTryBatch(t *testing.T, e *env) {
	bs, ok := e.Store.(backend.BatchStore)
	if !ok {
		t.Fatalf("%T is not a backend.BatchStore", e.Store)
	}
	a, b, fails, none := e.name("a"), e.name("b"), e.name("fails"), e.name("none")
	boom := errors.New("boom")
	if _, err := e.loop.Update(t.Context(), b, increment(b)); err != nil {
		t.Fatal(err)
	}
	attempts := []backend.Attempt{
		{Name: a, Decide: increment(a)},
		{Name: fails, Decide: func(backend.Snapshot) (*backend.Row, error) { return nil, boom }},
		{Name: b, Decide: increment(b)},
		{Name: none, Decide: func(backend.Snapshot) (*backend.Row, error) { return nil, nil }},
	}
	// A transaction that lost a race (the other tests run beside this one;
	// the Spanner emulator fails a transaction that another interrupts)
	// fails as a whole and writes nothing: made again, as Loop would make
	// its attempts again.
	var results []backend.Result
	err := backend.ErrConflict
	for try := 0; errors.Is(err, backend.ErrConflict) && try < 100 && t.Context().Err() == nil; try++ {
		results, err = bs.TryBatch(t.Context(), attempts)
	}
	if err != nil {
		t.Fatalf("TryBatch: %v", err)
	}
	if len(results) != 4 {
		t.Fatalf("TryBatch returned %d results for 4 attempts", len(results))
	}
	for i, want := range []int64{1, 0, 2, 0} {
		r := results[i]
		switch {
		case i == 1 && r.Err != boom:
			t.Errorf("attempt whose decide fails: %v, want decide's error unchanged", r.Err)
		case i != 1 && r.Err != nil:
			t.Errorf("attempt %d: %v", i, r.Err)
		case want == 0 && r.Snapshot.Row != nil:
			t.Errorf("attempt %d wrote nothing but answered %+v", i, r.Snapshot.Row)
		case want > 0 && (r.Snapshot.Row == nil || r.Snapshot.Row.FencingToken != want):
			t.Errorf("attempt %d = %+v, want token %d", i, r.Snapshot.Row, want)
		}
		if r.Err == nil && r.Snapshot.ServerTime.IsZero() {
			t.Errorf("attempt %d answered without a server time", i)
		}
	}
	for name, want := range map[string]int64{a: 1, b: 2, fails: 0, none: 0} {
		got, err := e.Store.Get(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if tok := tokenOf(got); tok != want {
			t.Errorf("%s holds token %d after TryBatch, want %d", name, tok, want)
		}
	}
}

func tokenOf(s backend.Snapshot) int64 {
	if s.Row == nil {
		return 0
	}
	return s.Row.FencingToken
}
