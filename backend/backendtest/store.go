package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// sampleRecord is a record with every field set, µs-precise times.
func sampleRecord(name string, now time.Time) *lease.Record {
	now = now.Truncate(time.Microsecond)
	return &lease.Record{
		Name: name, Holder: "holder ✓", FencingToken: 7, TTL: 1500 * time.Millisecond,
		AcquireTime: now.Add(-time.Second), RenewTime: now, ExpireTime: now.Add(1500 * time.Millisecond),
		Transitions: 3, Metadata: []byte(`{"addr":"10.0.0.1:80","n":[1,2]}`),
		Principal: "agent-7@example.com", RevokedBy: "oncall@example.com", RevokeReason: "stuck ✗ \"leader\"",
		// The succession state of docs/contract.md §8, stored as one JSON
		// column or field.
		Priority: 7, Checkpoint: []byte(`{"offset":1234,"files":["a ✓ <&>","b"],"nested":{"ok":true}}`), CheckpointToken: 6,
		Candidates: []lease.Candidate{
			{ID: "w-1", Holder: "standby ✓", Principal: "agent-8@example.com", Priority: 9, Preempt: true,
				Since: now.Add(-250 * time.Millisecond), Until: now.Add(30 * time.Second)},
			{ID: "w-2", Holder: "standby-2", Priority: 0, Since: now.Add(-time.Microsecond), Until: now.Add(time.Second + time.Microsecond)},
		},
		ReservedFor: "standby ✓", ReservedPrincipal: "agent-8@example.com", ReservedUntil: now.Add(2*time.Second + 3*time.Microsecond),
		// The session of docs/contract.md §14, stored with the succession
		// state.
		SessionKey: sampleSessionKey, SessionEpoch: 1<<40 + 3, SessionWindow: 1250 * time.Millisecond,
	}
}

// sampleSessionKey is a session key: the hex SHA-256 of a session id.
const sampleSessionKey = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// plainRecord is sampleRecord without any succession state, as records
// written before it existed are.
func plainRecord(name string, now time.Time) *lease.Record {
	r := sampleRecord(name, now)
	r.Priority, r.Checkpoint, r.CheckpointToken, r.Candidates, r.ReservedFor, r.ReservedUntil = 0, nil, 0, nil, "", time.Time{}
	r.ReservedPrincipal = ""
	r.SessionKey, r.SessionEpoch, r.SessionWindow = "", 0, 0
	return r
}

// equate compares records and leases whole: every field, times by their
// instant (time.Time's Equal), no metadata the same as empty metadata. A
// new field is compared without anyone remembering to.
var equate = cmp.Options{cmpopts.EquateEmpty()}

// recordDiff describes how got differs from want ("" when it does not).
func recordDiff(want, got *lease.Record) string { return cmp.Diff(want, got, equate) }

func put(t *testing.T, s records, r *lease.Record) lease.Snapshot {
	t.Helper()
	snap, err := s.Update(t.Context(), r.Name, func(lease.Snapshot) (*lease.Record, error) { return r, nil })
	if err != nil {
		t.Fatalf("Update(%s): %v", r.Name, err)
	}
	return snap
}

func testGetMissing(t *testing.T, e *env) {
	snap, err := e.recs.Get(t.Context(), e.name("missing"))
	if err != nil {
		t.Fatalf("Get(missing) = %v, want a snapshot without error", err)
	}
	if snap.Record != nil {
		t.Fatalf("Get(missing).Record = %+v, want nil", snap.Record)
	}
	if snap.ServerTime.IsZero() {
		t.Fatal("Get(missing).ServerTime is zero; a missing record still has a read time")
	}
}

func testUpdateRoundTrip(t *testing.T, e *env) {
	name := e.name("rt")
	var seen lease.Snapshot
	var want *lease.Record
	snap, err := e.recs.Update(t.Context(), name, func(s lease.Snapshot) (*lease.Record, error) {
		seen = s
		want = sampleRecord(name, s.ServerTime)
		return want, nil
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if seen.Record != nil || seen.ServerTime.IsZero() {
		t.Fatalf("decide saw %+v, want no record and a server time", seen)
	}
	if d := recordDiff(want, snap.Record); d != "" {
		t.Fatalf("Update returned a different record (-want +got):\n%s", d)
	}
	if !snap.ServerTime.Equal(seen.ServerTime) {
		t.Errorf("Update ServerTime = %v, want the decision's %v", snap.ServerTime, seen.ServerTime)
	}
	got, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if d := recordDiff(want, got.Record); d != "" {
		t.Fatalf("Get after Update (-want +got):\n%s", d)
	}
	listed := listOne(t, e, name)
	if d := recordDiff(want, listed); d != "" {
		t.Fatalf("List after Update (-want +got):\n%s", d)
	}
	// A second write replaces the first and decide sees the stored record.
	snap, err = e.recs.Update(t.Context(), name, func(s lease.Snapshot) (*lease.Record, error) {
		if recordDiff(want, s.Record) != "" {
			return nil, errors.New("decide did not see the stored record")
		}
		next := *s.Record
		next.FencingToken++
		next.Metadata = nil
		next.Principal, next.RevokedBy, next.RevokeReason = "", "", ""
		next.Priority, next.Checkpoint, next.CheckpointToken, next.Candidates, next.ReservedFor, next.ReservedUntil = 0, nil, 0, nil, "", time.Time{}
		next.ReservedPrincipal = ""
		next.SessionKey, next.SessionEpoch, next.SessionWindow = "", 0, 0
		return &next, nil
	})
	if err != nil {
		t.Fatalf("second Update: %v", err)
	}
	second := *plainRecord(name, seen.ServerTime)
	second.FencingToken, second.Metadata = 8, nil
	second.Principal, second.RevokedBy, second.RevokeReason = "", "", ""
	if d := recordDiff(&second, snap.Record); d != "" {
		t.Fatalf("second Update stored a different record (-want +got):\n%s", d)
	}
	got, err = e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get after second Update: %v", err)
	}
	if d := recordDiff(&second, got.Record); d != "" {
		t.Fatalf("Get after second Update, with principal, revocation and succession cleared (-want +got):\n%s", d)
	}
	if d := recordDiff(&second, listOne(t, e, name)); d != "" {
		t.Fatalf("List after second Update, with principal, revocation and succession cleared (-want +got):\n%s", d)
	}
	noSuccession(t, "Get after the succession state was cleared", got.Record)
}

// testSuccessionRoundTrip writes a record without succession state, then
// gives it all (docs/contract.md §8), then changes part of it: each reads
// back exactly through Try, Get and List, and a record without it reads
// back with every succession field zero.
func testSuccessionRoundTrip(t *testing.T, e *env) {
	name := e.name("succ")
	now, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	plain := plainRecord(name, now.ServerTime)
	full := sampleRecord(name, now.ServerTime)
	part := *full // one candidate gone, a new checkpoint, no reservation
	part.Candidates = []lease.Candidate{full.Candidates[1]}
	part.Checkpoint, part.CheckpointToken = []byte(`{"offset":99}`), 8
	part.ReservedFor, part.ReservedPrincipal, part.ReservedUntil = "", "", time.Time{}
	part.SessionEpoch++ // a takeover (docs/contract.md §14)
	session := *plain   // held through a session, and nothing else of the succession state
	session.SessionKey, session.SessionEpoch, session.SessionWindow = sampleSessionKey, 1, 200*time.Millisecond
	for i, want := range []*lease.Record{plain, full, &part, plain, &session, plain} {
		snap := put(t, e.recs, want)
		if d := recordDiff(want, snap.Record); d != "" {
			t.Fatalf("write %d: Update returned a different record (-want +got):\n%s", i+1, d)
		}
		got, err := e.recs.Get(t.Context(), name)
		if err != nil {
			t.Fatalf("write %d: Get: %v", i+1, err)
		}
		if d := recordDiff(want, got.Record); d != "" {
			t.Fatalf("write %d: Get (-want +got):\n%s", i+1, d)
		}
		if d := recordDiff(want, listOne(t, e, name)); d != "" {
			t.Fatalf("write %d: List (-want +got):\n%s", i+1, d)
		}
		if want == plain {
			noSuccession(t, fmt.Sprintf("write %d: Get of a record without succession state", i+1), got.Record)
		}
	}
}

// noSuccession fails unless r has no succession state: every field zero,
// no checkpoint at all (nil, not an empty one).
func noSuccession(t *testing.T, what string, r *lease.Record) {
	t.Helper()
	if r.Priority != 0 || r.Checkpoint != nil || r.CheckpointToken != 0 || len(r.Candidates) != 0 || r.ReservedFor != "" || r.ReservedPrincipal != "" || !r.ReservedUntil.IsZero() ||
		r.SessionKey != "" || r.SessionEpoch != 0 || r.SessionWindow != 0 {
		t.Fatalf("%s: succession fields %d, %q, %d, %+v, %q, %v, session %q %d %v; want all zero", what,
			r.Priority, r.Checkpoint, r.CheckpointToken, r.Candidates, r.ReservedFor, r.ReservedUntil, r.SessionKey, r.SessionEpoch, r.SessionWindow)
	}
}

// listOne returns the record under name as List reads it.
func listOne(t *testing.T, e *env, name string) *lease.Record {
	t.Helper()
	recs, _, err := e.recs.List(t.Context(), name, "", 1)
	if err != nil {
		t.Fatalf("List(%q): %v", name, err)
	}
	if len(recs) != 1 || recs[0].Name != name {
		t.Fatalf("List(%q) = %d records, want the one named so", name, len(recs))
	}
	return &recs[0]
}

func testDecideNil(t *testing.T, e *env) {
	name := e.name("nil")
	snap, err := e.recs.Update(t.Context(), name, func(lease.Snapshot) (*lease.Record, error) { return nil, nil })
	if err != nil || snap.Record != nil {
		t.Fatalf("Update(decide=nil) = %+v, %v; want no record, no error", snap.Record, err)
	}
	if got, _ := e.recs.Get(t.Context(), name); got.Record != nil {
		t.Fatalf("record created by a decide that returned nil: %+v", got.Record)
	}
	want := put(t, e.recs, sampleRecord(name, snap.ServerTime)).Record
	snap, err = e.recs.Update(t.Context(), name, func(lease.Snapshot) (*lease.Record, error) { return nil, nil })
	if d := recordDiff(want, snap.Record); err != nil || d != "" {
		t.Fatalf("Update(decide=nil) on a record: %v; want the record unchanged (-want +got):\n%s", err, d)
	}
}

func testDecideError(t *testing.T, e *env) {
	name := e.name("err")
	boom := errors.New("boom")
	_, err := e.recs.Update(t.Context(), name, func(s lease.Snapshot) (*lease.Record, error) {
		return sampleRecord(name, s.ServerTime), boom
	})
	if err != boom {
		t.Fatalf("Update = %v, want decide's error unchanged", err)
	}
	if got, _ := e.recs.Get(t.Context(), name); got.Record != nil {
		t.Fatalf("record written although decide failed: %+v", got.Record)
	}
}

// testNoLostUpdates runs concurrent read-modify-write increments; a store
// without a real compare-and-set loses some.
func testNoLostUpdates(t *testing.T, e *env) {
	name := e.name("counter")
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			loop := backend.NewLoop(e.Store) // one per worker, as processes have: no shared gate
			for range each {
				_, err := lease.UpdateWith(t.Context(), loop.Update, name, func(s lease.Snapshot) (*lease.Record, error) {
					r := sampleRecord(name, s.ServerTime)
					r.FencingToken = 1
					if s.Record != nil {
						r.FencingToken = s.Record.FencingToken + 1
					}
					return r, nil
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Update: %v", err)
	}
	got, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Record.FencingToken != workers*each {
		t.Fatalf("counter = %d after %d increments: updates were lost", got.Record.FencingToken, workers*each)
	}
}

func testServerTimeAdvances(t *testing.T, e *env) {
	name := e.name("time")
	a, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	e.pass(20 * time.Millisecond)
	w := put(t, e.recs, sampleRecord(name, a.ServerTime))
	e.pass(20 * time.Millisecond)
	b, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !a.ServerTime.Before(w.ServerTime) || !w.ServerTime.Before(b.ServerTime) {
		t.Fatalf("server times %v, %v, %v do not advance", a.ServerTime, w.ServerTime, b.ServerTime)
	}
	if d := b.ServerTime.Sub(a.ServerTime); d < 40*time.Millisecond || d > 30*time.Second {
		t.Fatalf("server time moved %v across 40ms", d)
	}
}

func testStoreList(t *testing.T, e *env) {
	names := []string{e.name("b"), e.name("a"), e.name("a.x"), e.name("a-y"), e.name("c")}
	now, _ := e.recs.Get(t.Context(), names[0])
	for _, n := range names {
		put(t, e.recs, sampleRecord(n, now.ServerTime))
	}
	list := func(prefix, after string, limit int) []string {
		t.Helper()
		recs, at, err := e.recs.List(t.Context(), prefix, after, limit)
		if err != nil {
			t.Fatalf("List(%q, %q, %d): %v", prefix, after, limit, err)
		}
		if at.IsZero() {
			t.Fatalf("List returned a zero server time")
		}
		out := []string{}
		for _, r := range recs {
			out = append(out, r.Name[len(e.prefix):])
		}
		return out
	}
	cases := []struct {
		prefix, after string
		limit         int
		want          []string
	}{
		{e.prefix, "", 10, []string{"a", "a-y", "a.x", "b", "c"}},
		{e.prefix, "", 2, []string{"a", "a-y"}},
		{e.prefix, e.name("a-y"), 2, []string{"a.x", "b"}},
		{e.name("a"), "", 10, []string{"a", "a-y", "a.x"}},
		{e.name("a"), e.name("a"), 10, []string{"a-y", "a.x"}},
		{e.name("a."), "", 10, []string{"a.x"}},
		{e.prefix, e.name("c"), 10, []string{}},
		{e.name("zz"), "", 10, []string{}},
	}
	for _, c := range cases {
		got := list(c.prefix, c.after, c.limit)
		if len(got) != len(c.want) {
			t.Errorf("List(%q, %q, %d) = %v, want %v", c.prefix, c.after, c.limit, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("List(%q, %q, %d) = %v, want %v", c.prefix, c.after, c.limit, got, c.want)
				break
			}
		}
	}
}

func testCancelledContext(t *testing.T, e *env) {
	name := e.name("cancel")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.recs.Get(ctx, name); !errors.Is(err, context.Canceled) {
		t.Errorf("Get(cancelled) = %v, want context.Canceled", err)
	}
	called := false
	_, err := e.recs.Update(ctx, name, func(s lease.Snapshot) (*lease.Record, error) {
		called = true
		return sampleRecord(name, s.ServerTime), nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update(cancelled) = %v, want context.Canceled", err)
	}
	if _, err := e.recs.Try(ctx, name, func(s lease.Snapshot) (*lease.Record, error) {
		called = true
		return sampleRecord(name, s.ServerTime), nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("Try(cancelled) = %v, want context.Canceled", err)
	}
	if _, _, err := e.recs.List(ctx, e.prefix, "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("List(cancelled) = %v, want context.Canceled", err)
	}
	if got, err := e.recs.Get(t.Context(), name); err != nil || got.Record != nil {
		t.Errorf("after a cancelled Update (decide called: %v) Get = %+v, %v; want nothing written", called, got.Record, err)
	}
}

// testTryOneAttempt runs concurrent increments as single attempts of the
// driver, without Loop: each attempt either writes or reports a conflict
// (ErrConflict), and the counter ends at the number of attempts that said
// they wrote.
func testTryOneAttempt(t *testing.T, e *env) {
	name := e.name("try")
	incr := func(s lease.Snapshot) (*lease.Record, error) {
		r := sampleRecord(name, s.ServerTime)
		r.FencingToken = 1
		if s.Record != nil {
			r.FencingToken = s.Record.FencingToken + 1
		}
		return r, nil
	}
	const workers, each = 6, 4
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		wrote int64
	)
	for range workers {
		wg.Go(func() {
			for range each {
				_, err := e.recs.Try(t.Context(), name, incr)
				switch {
				case err == nil:
					mu.Lock()
					wrote++
					mu.Unlock()
				case !errors.Is(err, backend.ErrConflict):
					t.Errorf("Try = %v; want success or backend.ErrConflict", err)
				}
			}
		})
	}
	wg.Wait()
	// Attempts go on until one writes (a backend may fail every one of the
	// racing attempts: the Spanner emulator runs one transaction at a time,
	// and the other tests' transactions race with these too).
	for i := 0; ; i++ {
		_, err := e.recs.Try(t.Context(), name, incr)
		if err == nil {
			wrote++
			break
		}
		if !errors.Is(err, backend.ErrConflict) || i == 100 {
			t.Fatalf("Try after the race (attempt %d): %v", i+1, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if got.Record == nil || got.Record.FencingToken != wrote {
		t.Fatalf("counter = %+v after %d attempts that said they wrote", got.Record, wrote)
	}
}
