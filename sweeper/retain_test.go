package sweeper_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/proofkey"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/sweeper"
)

// TestRetainFreeDeletes: with RetainFree the sweeper deletes the leases
// free that long, leaving a tombstone (the next acquire continues the
// token), and keeps the done markers of leasectl mcp, the leases freed
// since, and its own lease (docs/contract.md §15).
// Fake time (testing/synctest): the backend's clock and the sweeper's.
func TestRetainFreeDeletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var offset atomic.Int64 // backend time = real time + offset
		store := memory.New(memory.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
		var mu sync.Mutex
		var deleted []lease.Event
		oldGone := make(chan struct{}) // the deleted event of "old"
		m, err := lease.NewManager(store, lease.Config{MinTTL: 100 * time.Millisecond, OnChange: func(ev lease.Event) {
			if ev.Type == lease.EventDeleted {
				mu.Lock()
				deleted = append(deleted, ev)
				mu.Unlock()
				if ev.Lease.Name == "old" {
					close(oldGone)
				}
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		free := func(name string) {
			t.Helper()
			l, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "h", TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Release(ctx, lease.ReleaseRequest{Name: name, Holder: "h", FencingToken: l.FencingToken}); err != nil {
				t.Fatal(err)
			}
		}
		free("task.done") // before "old" in expire-time order: the scan passes it first
		key, err := proofkey.Publish(ctx, store, proofkey.Config{Instance: "i"})
		if err != nil {
			t.Fatal(err)
		}
		if err := key.Close(ctx); err != nil { // ended: free, like "old"
			t.Fatal(err)
		}
		free("old")
		offset.Add(int64(2 * time.Hour))
		free("recent")
		if _, err := m.Acquire(ctx, lease.AcquireRequest{Name: "held", Holder: "h", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}

		scans := &countingScanner{ExpiryScanner: store, before: func() time.Time {
			return time.Now().Add(time.Duration(offset.Load()) - 30*time.Minute)
		}}
		s, err := sweeper.New(sweeper.Config{Manager: m, Scanner: scans, Holder: "sw", Emit: func(lease.Event) {},
			TTL: 5 * time.Second, Interval: 20 * time.Millisecond, RetainFree: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = s.Run(runCtx); close(done) }()
		defer func() { cancel(); <-done }()

		select {
		case <-oldGone:
		case <-time.After(10 * time.Second):
			t.Fatal(`"old", free for 2h, was not deleted with RetainFree 1h`)
		}
		if _, err := m.Get(ctx, "old"); !errors.Is(err, lease.ErrNotFound) {
			t.Fatalf(`Get("old") after its deleted event = %v, want not found`, err)
		}
		if snap, err := lease.GetWith(ctx, store.Get, lease.KeyRecordPrefix+key.Kid()); err != nil || snap.Record == nil || lease.Tombstone(snap.Record) {
			t.Errorf("the proof key's record after the retention sweep: %+v, %v; want it kept", snap.Record, err)
		}
		for _, name := range []string{"task.done", "recent", "held", sweeper.DefaultLeaseName} {
			if _, err := m.Get(ctx, name); err != nil {
				t.Errorf("Get(%s) after the retention sweep = %v, want it kept", name, err)
			}
		}
		mu.Lock()
		got := append([]lease.Event(nil), deleted...)
		mu.Unlock()
		if len(got) != 1 || got[0].Lease.Name != "old" || got[0].Reason != sweeper.RetentionReason || got[0].Operator != "" {
			t.Fatalf("deleted events %+v, want one for old with reason %q", got, sweeper.RetentionReason)
		}
		l, err := m.Acquire(ctx, lease.AcquireRequest{Name: "old", Holder: "h2", TTL: time.Second})
		if err != nil || l.FencingToken != 2 {
			t.Fatalf("Acquire of the retained-away lease = %+v, %v; want token 2", l, err)
		}
		// Caught up, the retention scan waits RetainEvery (10 s) before it
		// looks again, while the expiry scan runs every 20 ms.
		<-time.After(300 * time.Millisecond)
		synctest.Wait()
		if n := scans.retention.Load(); n != 1 {
			t.Fatalf("%d retention scans, want 1 within RetainEvery", n)
		}
	})
}

// countingScanner counts the scans whose window ends before before(): the
// retention scans.
type countingScanner struct {
	backend.ExpiryScanner
	before    func() time.Time
	retention atomic.Int32
}

func (c *countingScanner) ScanExpiry(ctx context.Context, after backend.Cursor, until time.Time, limit int) ([]backend.Row, error) {
	if until.Before(c.before()) {
		c.retention.Add(1)
	}
	return c.ExpiryScanner.ScanExpiry(ctx, after, until, limit)
}

// TestRetainFreeCountsReservation: time a lease spends reserved for a
// transfer's successor (docs/contract.md §8) is not free time (§15): with
// RetainFree 1m, a lease reserved for 60 s after its holding ended stays
// until a minute after the reservation ended, while one released at the
// same moment without a reservation goes a minute after its release.
// Fake time (testing/synctest): the backend's clock and the sweeper's.
func TestRetainFreeCountsReservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		var mu sync.Mutex
		deletedAt := map[string]time.Time{}
		m, err := lease.NewManager(store, lease.Config{OnChange: func(ev lease.Event) {
			if ev.Type == lease.EventDeleted {
				mu.Lock()
				deletedAt[ev.Lease.Name] = time.Now()
				mu.Unlock()
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		plain, err := m.Acquire(ctx, lease.AcquireRequest{Name: "plain", Holder: "a", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		reserved, err := m.Acquire(ctx, lease.AcquireRequest{Name: "reserved", Holder: "a", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := m.Release(ctx, lease.ReleaseRequest{Name: "plain", Holder: "a", FencingToken: plain.FencingToken}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Transfer(ctx, lease.TransferRequest{Name: "reserved", Holder: "a", FencingToken: reserved.FencingToken, To: "b", Reserve: time.Minute}); err != nil {
			t.Fatal(err)
		}
		s, err := sweeper.New(sweeper.Config{Manager: m, Scanner: store, Holder: "sw", Emit: func(lease.Event) {}, RetainFree: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = s.Run(runCtx); close(done) }()
		elapse(3 * time.Minute) // the sweeper scans all along
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		p, r := deletedAt["plain"].Sub(start), deletedAt["reserved"].Sub(start)
		if deletedAt["plain"].IsZero() || p < time.Minute || p > time.Minute+2*sweeper.RetainEvery {
			t.Errorf("plain, free from the start, deleted after %v; want a minute on (within two retention scans)", p)
		}
		if deletedAt["reserved"].IsZero() || r < 2*time.Minute || r > 2*time.Minute+2*sweeper.RetainEvery {
			t.Errorf("reserved until a minute on, deleted after %v; want a minute after the reservation ended (2m, within two retention scans)", r)
		}
	})
}
