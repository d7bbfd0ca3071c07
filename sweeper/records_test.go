package sweeper_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/sweeper"
)

// TestEndedSessionRecordsRemoved: the sweeper removes for good (no
// tombstone) the records of sessions that ended RecordRetention ago,
// released or run out, and keeps a live one, one ended more recently and
// every other lease (docs/contract.md §14, Nothing left behind).
// Fake time (testing/synctest): the backend's clock and the sweeper's.
func TestEndedSessionRecordsRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var offset atomic.Int64 // backend time = real time + offset
		store := memory.New(memory.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
		m, err := lease.NewManager(store, lease.Config{MinTTL: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		record := func(key string, ttl time.Duration) (lease.Lease, *lease.SessionRef) {
			t.Helper()
			ref := &lease.SessionRef{Key: strings.Repeat(key, 64), Epoch: 1, Window: time.Second}
			l, err := m.Acquire(ctx, lease.AcquireRequest{Name: lease.SessionRecordName(ref.Key), Holder: "session", TTL: ttl, Session: ref})
			if err != nil {
				t.Fatal(err)
			}
			return l, ref
		}
		closed, cref := record("a", time.Minute)
		if _, err := m.Release(ctx, lease.ReleaseRequest{Name: closed.Name, Holder: closed.Holder, FencingToken: closed.FencingToken, Session: cref}); err != nil {
			t.Fatal(err)
		}
		ranOut, _ := record("b", 3*time.Second) // its instance died: never renewed
		if _, err := m.Acquire(ctx, lease.AcquireRequest{Name: "free", Holder: "h", TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		offset.Add(int64(2 * time.Minute))
		recent, rref := record("c", time.Minute)
		if _, err := m.Release(ctx, lease.ReleaseRequest{Name: recent.Name, Holder: recent.Holder, FencingToken: recent.FencingToken, Session: rref}); err != nil {
			t.Fatal(err)
		}
		live, _ := record("d", time.Hour)

		s, err := sweeper.New(sweeper.Config{Manager: m, Scanner: store, Holder: "sw", Emit: func(lease.Event) {},
			TTL: 5 * time.Second, Interval: 20 * time.Millisecond, RecordRetention: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = s.Run(runCtx); close(done) }()
		time.Sleep(time.Second)
		synctest.Wait()
		gone := func(name string) bool {
			snap, err := store.Get(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			return snap.Row == nil
		}
		if !gone(closed.Name) || !gone(ranOut.Name) {
			t.Fatalf("ended records left: closed gone %v, run out gone %v", gone(closed.Name), gone(ranOut.Name))
		}
		if gone(recent.Name) || gone(live.Name) || gone("free") {
			t.Fatal("removed a record ended less than the retention ago, a live record or another lease")
		}
		if _, err := m.Get(ctx, closed.Name); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf("a removed record reads %v; want ErrNotFound", err)
		}
		// A minute on, the recent one goes too (RetainEvery after the last scan).
		offset.Add(int64(time.Minute))
		time.Sleep(sweeper.RetainEvery + time.Second)
		synctest.Wait()
		if !gone(recent.Name) || gone(live.Name) {
			t.Fatalf("a minute on: recent gone %v (want true), live gone %v (want false)", gone(recent.Name), gone(live.Name))
		}
		cancel()
		<-done
	})
}
