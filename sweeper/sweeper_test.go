package sweeper_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/sweeper"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu  sync.Mutex
	got []string
	at  map[string]time.Time
}

func (r *recorder) emit(who string) func(lease.Event) {
	return func(ev lease.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		k := fmt.Sprintf("%s/%d/%s", ev.Lease.Name, ev.Lease.FencingToken, ev.Type)
		r.got = append(r.got, k)
		if r.at == nil {
			r.at = map[string]time.Time{}
		}
		r.at[k] = time.Now()
		if !ev.Time.Equal(ev.Lease.ExpireTime) || ev.Lease.Held() {
			r.got = append(r.got, "BAD:"+k)
		}
	}
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func start(t *testing.T, m *lease.Manager, store *memory.Store, holder string, rec *recorder) context.CancelFunc {
	t.Helper()
	s, err := sweeper.New(sweeper.Config{Manager: m, Scanner: store, Holder: holder, Emit: rec.emit(holder),
		TTL: 600 * time.Millisecond, Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() { cancel(); <-done }
}

// TestOneExpiredEventPerHolding runs two sweepers over one backend: each
// holding that runs out is announced once, within a second, and released or
// renewed holdings are not announced. Fake time (testing/synctest): the
// backend's clock, the sweepers' tickers and the test's steps.
func TestOneExpiredEventPerHolding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memory.New()
		m, err := lease.NewManager(store, lease.Config{MinTTL: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{}
		stopA := start(t, m, store, "sweeper-a", rec)
		start(t, m, store, "sweeper-b", rec)

		ctx := t.Context()
		x, _ := m.Acquire(ctx, lease.AcquireRequest{Name: "x", Holder: "h", TTL: 300 * time.Millisecond})
		y, _ := m.Acquire(ctx, lease.AcquireRequest{Name: "y", Holder: "h", TTL: 300 * time.Millisecond})
		_, _ = m.Release(ctx, lease.ReleaseRequest{Name: "y", Holder: "h", FencingToken: y.FencingToken})
		z, _ := m.Acquire(ctx, lease.AcquireRequest{Name: "z", Holder: "h", TTL: 300 * time.Millisecond})
		renew := time.NewTicker(100 * time.Millisecond)
		for range 6 { // keep z alive past the others' expiry
			<-renew.C
			z, _ = m.Renew(ctx, lease.RenewRequest{Name: "z", Holder: "h", FencingToken: z.FencingToken})
		}
		renew.Stop()
		if _, err := m.Renew(ctx, lease.RenewRequest{Name: "z", Holder: "h", FencingToken: z.FencingToken, TTL: time.Minute}); err != nil {
			t.Fatalf("renew z: %v", err)
		}
		elapse(time.Second)
		got := rec.events()
		if fmt.Sprint(got) != "[x/1/expired]" {
			t.Fatalf("events %v, want exactly [x/1/expired]", got)
		}
		if d := rec.at["x/1/expired"].Sub(x.ExpireTime); d > time.Second {
			t.Fatalf("expired event %v after the expiry, want within 1s", d)
		}

		// Stop whichever sweeper leads; the other takes over and announces.
		// A new sweeper rescans one TTL back, so it may announce x again: a
		// duplicate with the same ce-id, which docs/contract.md §5 allows at a hand-over.
		stopA()
		w, _ := m.Acquire(ctx, lease.AcquireRequest{Name: "w", Holder: "h", TTL: 200 * time.Millisecond})
		elapse(3 * time.Second) // w's announcement, and anything more, come now
		got = rec.events()
		d := map[string]int{}
		for _, e := range got {
			d[e]++
		}
		if len(d) != 2 || d["w/1/expired"] != 1 || d["x/1/expired"] > 2 {
			t.Fatalf("after a sweeper stopped: events %v, want w/1/expired once (and x at most once more)", got)
		}
		if d := rec.at["w/1/expired"].Sub(w.ExpireTime); d > 2*time.Second {
			t.Fatalf("w announced %v after its expiry", d)
		}
	})
}

// elapse lets d of fake time pass in a synctest bubble, then waits until
// every goroutine of the bubble is blocked: what d brings has happened.
func elapse(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

func TestNewChecksConfig(t *testing.T) {
	store := memory.New()
	m, _ := lease.NewManager(store, lease.Config{})
	emit := func(lease.Event) {}
	for _, cfg := range []sweeper.Config{
		{Scanner: store, Holder: "h", Emit: emit},
		{Manager: m, Holder: "h", Emit: emit},
		{Manager: m, Scanner: store, Emit: emit},
		{Manager: m, Scanner: store, Holder: "h"},
		{Manager: m, Scanner: store, Holder: "h", Emit: emit, LeaseName: "bad name"},
		{Manager: m, Scanner: store, Holder: "h", Emit: emit, TTL: -1},
		{Manager: m, Scanner: store, Holder: "h", Emit: emit, RetainFree: -time.Hour},
	} {
		if _, err := sweeper.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
