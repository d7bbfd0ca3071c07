package backendtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// remover returns the store under test as a backend.Remover; the suite
// runs the Remove tests only for stores that are one.
func (e *env) remover() backend.Remover { return e.Store.(backend.Remover) }

// remove removes the row under name if ok reports true of the record as
// stored (decoded from the row), retrying lost races as a caller does: a
// backend may fail a removal that raced with another test's transaction
// (the Spanner emulator runs one read-write transaction at a time).
func (e *env) remove(t *testing.T, name string, ok func(lease.Snapshot) bool) bool {
	t.Helper()
	for i := 0; ; i++ {
		removed, err := e.remover().Remove(t.Context(), name, decodedOK(t, ok))
		if err == nil {
			return removed
		}
		if !errors.Is(err, backend.ErrConflict) || i == 100 {
			t.Fatalf("Remove(%s) (attempt %d) = %v; want success, or ErrConflict now and then", name, i+1, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// decodedOK adapts ok to a backend snapshot: it sees the stored row
// decoded as a lease record. A row that does not decode fails the test
// and is not removed.
func decodedOK(t *testing.T, ok func(lease.Snapshot) bool) func(backend.Snapshot) bool {
	return func(s backend.Snapshot) bool {
		if s.Row == nil {
			t.Errorf("Remove called ok with a missing row (at %v); want it called only with a row", s.ServerTime)
			return false
		}
		rec, err := lease.DecodeRow(*s.Row)
		if err != nil {
			t.Errorf("Remove: the row it read does not decode: %v", err)
			return false
		}
		return ok(lease.Snapshot{Record: rec, ServerTime: s.ServerTime})
	}
}

// always is an ok that removes whatever it is shown.
func always(lease.Snapshot) bool { return true }

// testRemoveDeletes: a removal that ok allows deletes the row for good (docs/contract.md
// §14, Nothing left behind): Get shows no row, List and ScanExpiry no longer
// find it, its neighbours stay, a second removal finds nothing, and a
// write under the name afterwards starts from no row, with no tombstone.
func testRemoveDeletes(t *testing.T, e *env) {
	name, neighbour := e.name("gone"), e.name("gone.stays")
	now, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	rec := put(t, e.recs, sampleRecord(name, now.ServerTime)).Record
	put(t, e.recs, sampleRecord(neighbour, now.ServerTime))
	if !e.remove(t, name, always) {
		t.Fatalf("Remove(%s) with ok true = false; want the row removed", name)
	}
	got, err := e.recs.Get(t.Context(), name)
	if err != nil || got.Record != nil || got.ServerTime.IsZero() {
		t.Fatalf("Get after Remove = %+v at %v, %v; want no row, a server time and no error", got.Record, got.ServerTime, err)
	}
	recs, _, err := e.recs.List(t.Context(), e.prefix, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Name != neighbour {
		var names []string
		for _, r := range recs {
			names = append(names, r.Name)
		}
		t.Fatalf("List after Remove = %v; want only %s, the row beside it", names, neighbour)
	}
	if sc, ok := e.Store.(backend.ExpiryScanner); ok {
		found, err := lease.ScanExpiry(t.Context(), sc, backend.Cursor{ExpireTime: rec.ExpireTime.Add(-time.Millisecond)}, rec.ExpireTime, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range found {
			if r.Name == name {
				t.Fatalf("ScanExpiry after Remove still finds %s: %+v", name, r)
			}
		}
	}
	called := false
	if e.remove(t, name, func(lease.Snapshot) bool { called = true; return true }) || called {
		t.Fatalf("a second Remove(%s) removed a row or called ok (%v); want (false, nil) without ok", name, called)
	}
	var seen lease.Snapshot
	if _, err := e.recs.Update(t.Context(), name, func(s lease.Snapshot) (*lease.Record, error) {
		seen = s
		return sampleRecord(name, s.ServerTime), nil
	}); err != nil {
		t.Fatal(err)
	}
	if seen.Record != nil {
		t.Fatalf("a write after Remove saw %+v; want no row (no tombstone)", seen.Record)
	}
	if got, err := e.recs.Get(t.Context(), name); err != nil || got.Record == nil {
		t.Fatalf("Get after writing the removed name again = %+v, %v; want the new row", got.Record, err)
	}
}

// testRemoveRefused: a removal that ok refuses leaves the row as it was,
// and one with a cancelled context removes nothing.
func testRemoveRefused(t *testing.T, e *env) {
	name := e.name("kept")
	now, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	want := put(t, e.recs, sampleRecord(name, now.ServerTime)).Record
	calls := 0
	if e.remove(t, name, func(lease.Snapshot) bool { calls++; return false }) || calls == 0 {
		t.Fatalf("Remove with ok false removed the row, or never asked ok (%d calls)", calls)
	}
	got, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff(want, got.Record); d != "" {
		t.Fatalf("the row after a refused Remove (-want +got):\n%s", d)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if removed, err := e.remover().Remove(ctx, name, decodedOK(t, always)); removed || !errors.Is(err, context.Canceled) {
		t.Fatalf("Remove(cancelled) = %v, %v; want false, context.Canceled", removed, err)
	}
	if got, err := e.recs.Get(t.Context(), name); err != nil || recordDiff(want, got.Record) != "" {
		t.Fatalf("the row after a cancelled Remove = %+v, %v; want it unchanged", got.Record, err)
	}
}

// testRemoveMissing: removing a row that never existed is (false, nil),
// without calling ok, and creates nothing.
func testRemoveMissing(t *testing.T, e *env) {
	name := e.name("never")
	var removed bool
	var err error
	for i := 0; i < 100; i++ { // a lost race (the Spanner emulator's one transaction) is retried, as a caller does
		removed, err = e.remover().Remove(t.Context(), name, func(s backend.Snapshot) bool {
			t.Errorf("Remove of a missing row called ok with %+v", s)
			return true
		})
		if !errors.Is(err, backend.ErrConflict) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if removed || err != nil {
		t.Fatalf("Remove of a missing row = %v, %v; want false, nil", removed, err)
	}
	if got, err := e.recs.Get(t.Context(), name); err != nil || got.Record != nil {
		t.Fatalf("Get after removing a missing row = %+v, %v; want no row", got.Record, err)
	}
}

// testRemoveSees: ok sees the row as last written and the backend's time of
// the removal's read, between the reads before and after it; a removal
// that waits for a record to have ended (as the sweeper of session records
// does) is refused while it has not and goes through once it has.
func testRemoveSees(t *testing.T, e *env) {
	name := e.name("sees")
	before, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	put(t, e.recs, sampleRecord(name, before.ServerTime))
	next := plainRecord(name, before.ServerTime)
	next.FencingToken = 8
	next.ExpireTime = next.RenewTime.Add(3 * time.Second) // still to come after the writes and reads below, on a slow emulator too
	want := put(t, e.recs, next).Record
	e.pass(20 * time.Millisecond)
	var seen lease.Snapshot
	e.remove(t, name, func(s lease.Snapshot) bool { seen = s; return false })
	e.pass(20 * time.Millisecond)
	after, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if d := recordDiff(want, seen.Record); d != "" {
		t.Fatalf("ok saw another row than the last written (-want +got):\n%s", d)
	}
	if !before.ServerTime.Before(seen.ServerTime) || !seen.ServerTime.Before(after.ServerTime) {
		t.Fatalf("ok saw the server time %v; want one between the reads before (%v) and after (%v) it", seen.ServerTime, before.ServerTime, after.ServerTime)
	}

	ended := func(s lease.Snapshot) bool { return !s.ServerTime.Before(s.Record.ExpireTime) }
	if e.remove(t, name, ended) {
		t.Fatalf("Remove if ended removed a record that expires at %v", want.ExpireTime)
	}
	e.expire(want.ExpireTime.Sub(after.ServerTime))
	if !e.remove(t, name, ended) {
		t.Fatalf("Remove if ended kept a record that expired at %v", want.ExpireTime)
	}
	if got, err := e.recs.Get(t.Context(), name); err != nil || got.Record != nil {
		t.Fatalf("Get after the removal of the ended record = %+v, %v; want no row", got.Record, err)
	}
}

// raceRounds is how many times testRemoveRace races a Try and a Remove.
const raceRounds = 20

// testRemoveRace races a Try that bumps the fencing token of a record with
// a Remove that removes it only at the token both read first, raceRounds
// times. Each either succeeds on what the other left (the Try finds no row
// and writes nothing; the Remove finds the new token and keeps the row) or
// fails with ErrConflict having written nothing; never do both succeed on
// the same stale read, and the row left behind says which one won.
func testRemoveRace(t *testing.T, e *env) {
	var removals, writes, conflicts int
	for round := range raceRounds {
		name := e.name("race") + string(rune('a'+round))
		now, err := e.recs.Get(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		first := plainRecord(name, now.ServerTime)
		first.FencingToken = 1
		put(t, e.recs, first)
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			removed  bool
			rmErr    error
			tried    lease.Snapshot
			tryErr   error
			triedRow bool // the Try's last decide saw a row
		)
		rm := func() {
			<-start
			removed, rmErr = e.remover().Remove(t.Context(), name, decodedOK(t, func(s lease.Snapshot) bool { return s.Record.FencingToken == 1 }))
		}
		try := func() {
			<-start
			tried, tryErr = e.recs.Try(t.Context(), name, func(s lease.Snapshot) (*lease.Record, error) {
				if triedRow = s.Record != nil; !triedRow {
					return nil, nil // removed: nothing to bump
				}
				r := *s.Record
				r.FencingToken++
				return &r, nil
			})
		}
		if round%2 == 0 { // each goes first in half the rounds
			wg.Go(rm)
			wg.Go(try)
		} else {
			wg.Go(try)
			wg.Go(rm)
		}
		close(start)
		wg.Wait()
		for what, err := range map[string]error{"Remove": rmErr, "Try": tryErr} {
			if err != nil && !errors.Is(err, backend.ErrConflict) {
				t.Fatalf("round %d: %s = %v; want success or ErrConflict", round, what, err)
			}
			if err != nil {
				conflicts++
			}
		}
		wrote := tryErr == nil && triedRow
		if tryErr == nil && !triedRow && !removed {
			t.Fatalf("round %d: Try saw no row, yet the Remove removed none (Remove error %v)", round, rmErr)
		}
		if wrote && tried.Record.FencingToken != 2 {
			t.Fatalf("round %d: Try wrote token %d; want 2", round, tried.Record.FencingToken)
		}
		if removed && wrote {
			t.Fatalf("round %d: both the Remove and the Try that bumped the token to 2 succeeded: one decided on a stale read", round)
		}
		got, err := e.recs.Get(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case removed:
			removals++
			if got.Record != nil {
				t.Fatalf("round %d: Remove reported a removal, yet the row is there: %+v", round, got.Record)
			}
		case wrote:
			writes++
			if got.Record == nil || got.Record.FencingToken != 2 {
				t.Fatalf("round %d: Try wrote token 2, yet the row is %+v", round, got.Record)
			}
		default: // both lost (or the Try wrote nothing): the first row stays
			if got.Record == nil || got.Record.FencingToken != 1 {
				t.Fatalf("round %d: neither the Remove nor the Try wrote (errors %v, %v), yet the row is %+v", round, rmErr, tryErr, got.Record)
			}
		}
	}
	t.Logf("%d rounds: the Remove won %d, the Try %d; %d conflicts", raceRounds, removals, writes, conflicts)
}
