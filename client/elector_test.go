package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// term records what the callbacks of one Elector saw.
type term struct {
	mu       sync.Mutex
	started  int
	stopped  int
	leaders  []string
	ctx      context.Context // the last leading ctx
	cancelAt time.Time       // fake time when it was seen cancelled
	token    int64
}

// config returns an ElectorConfig whose callbacks record into r; clock is
// the Keeper's, on which r records when the leading ctx ended.
func (r *term) config(clock client.Clock, holder string) client.ElectorConfig {
	return client.ElectorConfig{
		Holder: holder,
		Wait:   -1, // the fake clock cannot drive the service's real-time wait
		Callbacks: client.LeaderCallbacks{OnStartedLeading: func(ctx context.Context) {
			tok, _ := client.TokenFromContext(ctx)
			r.mu.Lock()
			r.started++
			r.ctx, r.token = ctx, tok
			r.mu.Unlock()
			<-ctx.Done()
			r.mu.Lock()
			r.cancelAt = clock.Now()
			r.mu.Unlock()
		},
			OnStoppedLeading: func() { r.mu.Lock(); r.stopped++; r.mu.Unlock() },
			OnNewLeader:      func(h string) { r.mu.Lock(); r.leaders = append(r.leaders, h); r.mu.Unlock() },
		},
	}
}

// keeperElector returns an Elector for name over a new Keeper of kcfg
// over c, closed when the test ends (after the Elector has stopped).
func keeperElector(t testing.TB, c *client.Client, name string, kcfg client.KeeperConfig, cfg client.ElectorConfig) (*client.Elector, error) {
	t.Helper()
	k, err := client.NewKeeper(context.Background(), c, kcfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(k.Close)
	return client.NewElector(k, name, cfg)
}

// cancelledAt waits until the leading callback has seen its ctx cancelled
// (which it records just after ctx.Done, so ctx.Err alone can come first)
// and returns the fake time it saw it at.
func (r *term) cancelledAt(t testing.TB) time.Time {
	t.Helper()
	var at time.Time
	waitFor(t, "the leading callback to see its ctx cancelled", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		at = r.cancelAt
		return !at.IsZero()
	})
	return at
}

func (r *term) get() (started, stopped int, ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started, r.stopped, r.ctx
}

// runElector starts e.Run and returns a func that stops it and returns
// Run's error.
func runElector(t *testing.T, e *client.Elector) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return within 10s of its ctx being cancelled")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

var epoch = time.Date(2026, 11, 21, 18, 0, 0, 0, time.UTC)

func TestElectorLeadsRenewsAndReleases(t *testing.T) {
	clock := fakeclock.New(epoch)
	s := newService(t, clock)
	c := s.client(t, client.Config{MaxAttempts: 1})
	var rec term
	e, err := keeperElector(t, c, "svc.lead", client.KeeperConfig{Clock: clock}, rec.config(clock, "agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	stop := runElector(t, e)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	if tok, ok := e.Token(); !ok || tok != 1 || !e.IsLeader() {
		t.Fatalf("Token() = %d, %v", tok, ok)
	}
	if h, tok := e.Leader(); h != "agent-a" || tok != 1 {
		t.Fatalf("Leader() = %s, %d", h, tok)
	}
	// Two minutes of renewals at TTL/3 keep it leading.
	for range 12 {
		before := s.renews.Load()
		clock.Advance(10 * time.Second)
		waitFor(t, "a renew", func() bool { return s.renews.Load() > before })
		waitFor(t, "renew timer re-armed", func() bool { return clock.Timers() == 2 })
	}
	_, _, ctx := rec.get()
	if ctx.Err() != nil || !e.IsLeader() {
		t.Fatalf("leadership ended while renewals succeeded: %v", context.Cause(ctx))
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if _, stopped, _ := rec.get(); stopped != 1 || e.IsLeader() {
		t.Fatalf("OnStoppedLeading called %d times", stopped)
	}
	l, err := c.Get(t.Context(), "svc.lead")
	if err != nil || l.Held || l.FencingToken != 1 {
		t.Fatalf("after a graceful stop the lease is %+v, %v; want released", l, err)
	}
	if rec.leaders[0] != "agent-a" {
		t.Fatalf("OnNewLeader saw %v", rec.leaders)
	}
}

// TestTwoElectorsOneLeadsThenHandOver: of two Electors of one lease, one
// leads at every instant through a minute of renewals; when it stops, the
// other takes over with the next token at once (its acquire waited on the
// service).
func TestTwoElectorsOneLeadsThenHandOver(t *testing.T) { synctest.Test(t, twoElectorsHandOver) }

func twoElectorsHandOver(t *testing.T) {
	s := newServiceHandler(t, nil)
	c := s.bubbleClient(t)
	var ra, rb term
	cfg := func(r *term, holder string) client.ElectorConfig {
		cfg := r.config(client.SystemClock{}, holder)
		cfg.Wait = time.Minute // the bubble's clock drives the service's waits too
		return cfg
	}
	a, err := keeperElector(t, c, "svc.two", client.KeeperConfig{}, cfg(&ra, "agent-a"))
	if err != nil {
		t.Fatal(err)
	}
	stopA := runElector(t, a)
	synctest.Wait()
	if n, _, _ := ra.get(); n != 1 {
		t.Fatalf("a started leading %d times, want 1", n)
	}
	b, err := keeperElector(t, c, "svc.two", client.KeeperConfig{}, cfg(&rb, "agent-b"))
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, b)
	synctest.Wait()
	if h, _ := b.Leader(); h != "agent-a" {
		t.Fatalf("b sees %q leading, want agent-a", h)
	}
	for range 12 {
		advance(5 * time.Second)
		if !a.IsLeader() || b.IsLeader() {
			t.Fatalf("a leads %v, b leads %v", a.IsLeader(), b.IsLeader())
		}
	}
	if err := stopA(); err != nil { // a releases
		t.Fatal(err)
	}
	synctest.Wait()
	if tok, _ := b.Token(); !b.IsLeader() || tok != 2 {
		t.Fatalf("after a released, b leads %v with token %d, want token 2 at once", b.IsLeader(), tok)
	}
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if strings.Join(rb.leaders, ",") != "agent-a,agent-b" {
		t.Fatalf("b's OnNewLeader saw %v", rb.leaders)
	}
}

// TestRenewFailuresCancelAtSafeDeadline: however the service fails, the
// leading ctx is cancelled exactly at send time of the last successful
// renew + TTL × (1 − DriftMargin) − CancelBefore, and not before; by
// default CancelBefore is min(250ms, TTL/10).
func TestRenewFailuresCancelAtSafeDeadline(t *testing.T) {
	for _, tc := range []struct {
		name         string
		f            fault
		cause        error
		cancelBefore time.Duration // set in the config; 0 = the default
		want         time.Duration // the CancelBefore in force
	}{
		{"503", unavailable, client.ErrUnavailable, 2 * time.Second, 2 * time.Second},
		{"hang", hang, client.ErrSafeDeadline, 2 * time.Second, 2 * time.Second},
		{"connection dropped", drop, client.ErrUnavailable, 2 * time.Second, 2 * time.Second},
		{"503 default CancelBefore", unavailable, client.ErrUnavailable, 0, client.DefaultCancelBefore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newServiceHandler(t, nil)
				c := s.bubbleClient(t)
				var rec term
				cfg := rec.config(client.SystemClock{}, "agent-a")
				cfg.CancelBefore = tc.cancelBefore
				e, _ := keeperElector(t, c, "svc.fail", client.KeeperConfig{}, cfg)
				start := time.Now()
				runElector(t, e)
				t.Cleanup(func() { s.set(healthy) }) // before the Elector stops
				synctest.Wait()
				if n, _, _ := rec.get(); n != 1 {
					t.Fatalf("started leading %d times, want 1", n)
				}
				// One good renew at +10s moves the deadline to 10 + 27 − CancelBefore.
				advance(10 * time.Second)
				if n := s.renews.Load(); n != 1 {
					t.Fatalf("%d renews in the first 10s, want 1", n)
				}
				renewed := time.Unix(0, s.renewed.Load()) // sent then: no time passes in-process
				s.set(tc.f)
				deadline := renewed.Add(27*time.Second - tc.want)
				advance(time.Until(deadline) - time.Millisecond)
				_, _, ctx := rec.get()
				if ctx.Err() != nil {
					t.Fatalf("cancelled before the safe deadline: %v", context.Cause(ctx))
				}
				if s.renews.Load() < 3 && tc.f != hang { // a hanging renew is not retried until its attempt times out
					t.Fatalf("only %d renews tried", s.renews.Load())
				}
				advance(time.Millisecond)
				if ctx.Err() == nil {
					t.Fatal("not cancelled at the safe deadline")
				}
				cause := context.Cause(ctx)
				if !errors.Is(cause, client.ErrSafeDeadline) || !errors.Is(cause, tc.cause) {
					t.Fatalf("cause %v, want ErrSafeDeadline and %v", cause, tc.cause)
				}
				if at := rec.cancelledAt(t); !at.Equal(deadline) {
					t.Fatalf("cancelled at +%v, want +%v", at.Sub(start), deadline.Sub(start))
				}
				if _, n, _ := rec.get(); n != 1 || e.IsLeader() {
					t.Fatalf("OnStoppedLeading called %d times, IsLeader %v after the deadline", n, e.IsLeader())
				}
				s.set(healthy)
			})
		})
	}
}

func TestLeaseLostCancelsAtOnce(t *testing.T) {
	clock := fakeclock.New(epoch)
	s := newService(t, clock)
	c := s.client(t, client.Config{MaxAttempts: 1})
	var rec term
	e, _ := keeperElector(t, c, "svc.lost", client.KeeperConfig{Clock: clock}, rec.config(clock, "agent-a"))
	runElector(t, e)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	_, _, ctx := rec.get()
	s.set(lost)
	clock.Advance(10 * time.Second)
	waitFor(t, "cancelled", func() bool { return ctx.Err() != nil })
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	if at := rec.cancelledAt(t); at.Sub(epoch) > 10*time.Second {
		t.Fatalf("cancelled at +%v, want at the renew (+10s at most)", at.Sub(epoch))
	}
	waitFor(t, "OnStoppedLeading", func() bool { _, n, _ := rec.get(); return n == 1 })
	s.set(healthy)
	// It campaigns again: the same holder gets its live holding back.
	clock.Advance(10 * time.Second)
	waitFor(t, "leading again", func() bool { n, _, _ := rec.get(); return n == 2 })
}

func TestReturningResigns(t *testing.T) {
	clock := fakeclock.New(epoch)
	s := newService(t, clock)
	c := s.client(t, client.Config{MaxAttempts: 1})
	stopped := make(chan struct{})
	e, _ := keeperElector(t, c, "svc.resign", client.KeeperConfig{Clock: clock}, client.ElectorConfig{
		Holder: "a", Wait: -1,
		Callbacks: client.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {},
			OnStoppedLeading: func() { close(stopped) },
		},
	})
	if err := e.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-stopped
	if l, err := c.Get(t.Context(), "svc.resign"); err != nil || l.Held {
		t.Fatalf("after resigning: %+v, %v", l, err)
	}
}

func TestElectorConfigChecked(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{PlainRenewals: true, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ok := client.LeaderCallbacks{OnStartedLeading: func(context.Context) {}}
	cases := []struct {
		name  string
		lease string
		cfg   client.ElectorConfig
		field string
	}{
		{"no callback", "x", client.ElectorConfig{}, "OnStartedLeading"},
		{"bad name", "-x", client.ElectorConfig{Callbacks: ok}, "lease name"},
		{"bad holder", "x", client.ElectorConfig{Callbacks: ok, Holder: "a\x07"}, "Holder"},
		{"cancel too early", "x", client.ElectorConfig{Callbacks: ok, CancelBefore: 20 * time.Second}, "CancelBefore"},
		{"cancel negative", "x", client.ElectorConfig{Callbacks: ok, CancelBefore: -time.Second}, "CancelBefore"},
		{"wait", "x", client.ElectorConfig{Callbacks: ok, Wait: 2 * time.Minute}, "Wait"},
		{"preempt without wait", "x", client.ElectorConfig{Callbacks: ok, Wait: -1, Preempt: true}, "Preempt"},
		{"metadata", "x", client.ElectorConfig{Callbacks: ok, Metadata: []byte("{")}, "Metadata"},
		{"priority", "x", client.ElectorConfig{Callbacks: ok, Priority: 1001}, "Priority"},
	}
	for _, tc := range cases {
		_, err := client.NewElector(k, tc.lease, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
	if _, err := client.NewElector(nil, "x", client.ElectorConfig{Callbacks: ok}); err == nil {
		t.Error("NewElector without a Keeper succeeded")
	}
	e, err := client.NewElector(k, "x", client.ElectorConfig{Callbacks: ok})
	if err != nil || !strings.Contains(e.Holder(), "-") {
		t.Fatalf("defaults: %v, holder %q", err, e.Holder())
	}
}

// TestKeeperConfigChecked: the holding's settings are the Keeper's, and
// NewKeeper names the field at fault.
func TestKeeperConfigChecked(t *testing.T) {
	c := newService(t, nil).client(t, client.Config{})
	for _, tc := range []struct {
		name  string
		cfg   client.KeeperConfig
		field string
	}{
		{"ttl fraction of a ms", client.KeeperConfig{PlainRenewals: true, TTL: 1500 * time.Microsecond}, "TTL"},
		{"renew too late", client.KeeperConfig{PlainRenewals: true, TTL: 30 * time.Second, RenewInterval: 27 * time.Second}, "RenewInterval"},
		{"margin", client.KeeperConfig{PlainRenewals: true, DriftMargin: 0.9}, "DriftMargin"},
		{"jitter", client.KeeperConfig{PlainRenewals: true, RenewJitter: 0.9}, "RenewJitter"},
		{"backoff", client.KeeperConfig{PlainRenewals: true, RetryBackoff: client.Backoff{Initial: time.Second, Max: time.Millisecond}}, "RetryBackoff"},
		{"cancel too early for the ttl", client.KeeperConfig{PlainRenewals: true, TTL: 3 * time.Second, CancelBefore: 2 * time.Second}, "CancelBefore"},
	} {
		if err := tc.cfg.Validate(); err == nil && tc.field != "CancelBefore" {
			t.Errorf("%s: Validate passed", tc.name)
		}
		k, err := client.NewKeeper(t.Context(), c, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, %v, want an error naming %s", tc.name, k, err, tc.field)
		}
	}
}

// TestRateLimitedRetriesAfterRetryAfter: a 429 says the caller's own rate
// limit refuses anything sooner than its Retry-After, so the Elector waits
// that long before it retries, both while campaigning and while leading
// (the backoff alone would retry within a second and be refused again).
func TestRateLimitedRetriesAfterRetryAfter(t *testing.T) {
	clock := fakeclock.New(epoch)
	s := newService(t, clock)
	s.set(limited)
	c := s.client(t, client.Config{MaxAttempts: 1})
	var rec term
	e, _ := keeperElector(t, c, "svc.limited", client.KeeperConfig{Clock: clock}, rec.config(clock, "agent-a"))
	runElector(t, e)
	waitFor(t, "a retry of the acquire scheduled", func() bool { _, ok := clock.Next(); return s.acquires.Load() == 1 && ok })
	if next, _ := clock.Next(); !next.Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("acquire retried at +%v after a 429 with Retry-After: 5, want +5s", next.Sub(epoch))
	}
	s.set(healthy)
	clock.Advance(5 * time.Second)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	_, _, ctx := rec.get()

	// Leading: the next renew is refused with 429.
	// The term arms the safe deadline's timer, then the renew's, after
	// OnStartedLeading has been called; the renew's is the earlier.
	s.set(limited)
	waitFor(t, "the renew timer armed beside the safe deadline's", func() bool { return clock.Timers() == 2 })
	next, _ := clock.Next()
	clock.Advance(next.Sub(clock.Now()))
	waitFor(t, "the renew refused", func() bool { return s.renews.Load() == 1 })
	refused := clock.Now()
	waitFor(t, "a retry of the renew scheduled", func() bool {
		next, ok := clock.Next()
		return ok && next.Before(refused.Add(10*time.Second))
	})
	if next, _ := clock.Next(); !next.Equal(refused.Add(5 * time.Second)) {
		t.Fatalf("renew retried %v after a 429 with Retry-After: 5, want 5s", next.Sub(refused))
	}
	s.set(healthy)
	clock.Advance(5 * time.Second)
	waitFor(t, "renewed", func() bool { return s.renews.Load() == 2 })
	if ctx.Err() != nil {
		t.Fatalf("leading ctx ended: %v", context.Cause(ctx))
	}
}

// A ctx cancelled from inside OnStartedLeading is a graceful stop even
// when the callback returns before Run's loop has seen the cancellation:
// the lease is released either way (ExampleElector once kept it).
func TestStopFromTheCallbackReleases(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{MaxAttempts: 1})
	for i := range 200 {
		ctx, cancel := context.WithCancel(t.Context())
		e, err := c.NewElector("svc.stop", client.ElectorConfig{
			Holder: "a", Wait: -1, Logger: slog.New(slog.DiscardHandler),
			Callbacks: client.LeaderCallbacks{OnStartedLeading: func(context.Context) { cancel() }},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Run(ctx); err != nil {
			t.Fatalf("run %d: Run = %v", i, err)
		}
		if l, err := c.Get(t.Context(), "svc.stop"); err != nil || l.Held {
			t.Fatalf("run %d: after a stop from the callback the lease is %+v, %v; want released", i, l, err)
		}
	}
}
