package httpapi_test

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// refreshTestInterval is the refresh of the services of these tests.
const refreshTestInterval = 100 * time.Millisecond

// refreshService serves the API over store with its changes going to its
// own hub, re-reading refreshed prefixes every refreshTestInterval. Two
// services over one store are two instances without Pub/Sub: neither sees
// the other's changes as events.
func refreshService(t *testing.T, store backend.Store) e2e.Client {
	t.Helper()
	c, _ := refreshServiceManager(t, store)
	return c
}

// refreshServiceManager is refreshService, with the service's Manager, for
// what only the lease layer can do (hold through a session).
func refreshServiceManager(t *testing.T, store backend.Store) (e2e.Client, *lease.Manager) {
	t.Helper()
	events := hub.New()
	m, err := lease.NewManager(store, lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events, Heartbeat: time.Hour,
		Limits: httpapi.Limits{StreamRefresh: refreshTestInterval}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.CloseStreams(); srv.Close() })
	return e2e.Client{URL: srv.URL}, m
}

// refreshLease is a lease in a refresh event, as the dashboard reads it.
type refreshLease struct {
	Name                  string `json:"name"`
	FencingToken          int64  `json:"fencingToken"`
	Holder                string `json:"holder"`
	Held                  bool   `json:"held"`
	RemainingMs           int64  `json:"remainingMs"`
	TTLMs                 int64  `json:"ttlMs"`
	Priority              int    `json:"priority"`
	ReservedFor           string `json:"reservedFor"`
	ReservedUntil         string `json:"reservedUntil"`
	YieldRequested        bool   `json:"yieldRequested"`
	YieldTo               string `json:"yieldTo"`
	Candidates            int    `json:"candidates"`
	BestCandidatePriority *int   `json:"bestCandidatePriority"`
	Session               *bool  `json:"session"`
	SessionWindowMs       *int64 `json:"sessionWindowMs"`
}

// nextRefresh reads the stream until a refresh event that has lease name,
// failing on any other event type but those in allowed.
func nextRefresh(t *testing.T, s *e2e.Stream, name string, allowed ...string) refreshLease {
	t.Helper()
	for {
		ev := s.Next(t)
		if ev.Event != "refresh" {
			ok := false
			for _, a := range allowed {
				ok = ok || a == ev.Event
			}
			if !ok {
				t.Fatalf("got %s event %s, want a refresh of %s", ev.Event, ev.Data, name)
			}
			continue
		}
		if ev.ID != "" {
			t.Fatalf("refresh event has id %q: it is not a cursor", ev.ID)
		}
		var body struct {
			Leases []refreshLease `json:"leases"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &body); err != nil {
			t.Fatalf("refresh %s: %v", ev.Data, err)
		}
		for _, l := range body.Leases {
			if l.Name == name {
				return l
			}
		}
	}
}

// TestWatchPrefixRefreshCarriesRenewals: with refresh=true, a renewal (not
// an event) reaches the stream within an interval as a refresh event with
// the time left as of its sending; a lease nobody renewed is not in it; a
// stream without refresh=true gets none.
func TestWatchPrefixRefreshCarriesRenewals(t *testing.T) {
	c := refreshService(t, memory.New())
	post(t, c, "/v1/leases/rf.a:acquire", `{"holder":"a","ttlMs":10000}`)
	post(t, c, "/v1/leases/rf.b:acquire", `{"holder":"b","ttlMs":60000}`)
	s := e2e.OpenStream(t, c, "/v1/leases:watch?prefix=rf.&refresh=true", "")
	plain := e2e.OpenStream(t, c, "/v1/leases:watch?prefix=rf.", "")
	nextEvents(t, s, 2)
	nextEvents(t, plain, 2)
	time.Sleep(2 * refreshTestInterval) // let a scan pass: it must send nothing, nothing changed
	start := time.Now()
	for range 3 {
		post(t, c, "/v1/leases/rf.a:renew", `{"holder":"a","fencingToken":1}`)
		l := nextRefresh(t, s, "rf.a")
		if l.FencingToken != 1 || l.Holder != "a" || !l.Held || l.TTLMs != 10000 || l.RemainingMs < 9000 || l.RemainingMs > 10000 {
			t.Fatalf("refresh of rf.a after a renewal: %+v, want held by a, token 1, ttl 10 s, 9–10 s left", l)
		}
	}
	if took := time.Since(start); took > 3*(refreshTestInterval+time.Second) {
		t.Fatalf("three renewals took %v to reach the stream", took)
	}
	// The plain stream's next event is the next change, no refresh.
	post(t, c, "/v1/leases/rf.b:release", `{"holder":"b","fencingToken":1}`)
	if got := ids(nextEvents(t, plain, 1)); got[0] != "rf.b/1/released" {
		t.Fatalf("the stream without refresh got %v, want the release", got)
	}
	// rf.b was not renewed: its release is an event, and no refresh repeats it.
	if got := ids(nextEvents(t, s, 1)); got[0] != "rf.b/1/released" {
		t.Fatalf("the refreshed stream got %v, want the release", got)
	}
	post(t, c, "/v1/leases/rf.a:renew", `{"holder":"a","fencingToken":1}`)
	if l := nextRefresh(t, s, "rf.a"); l.Name != "rf.a" {
		t.Fatalf("refresh %+v", l)
	}
}

// TestWatchPrefixRefreshSeesOtherInstances: changes made on another
// instance that no event brings (no Pub/Sub) reach a refreshed stream: a
// renewal as a refresh event, a new holding and an end (expiry, release)
// as snapshots, after ReorderWait (events, had they come, go first).
func TestWatchPrefixRefreshSeesOtherInstances(t *testing.T) {
	store := memory.New()
	c := refreshService(t, store)
	other := refreshService(t, store)
	post(t, c, "/v1/leases/oi.a:acquire", `{"holder":"a","ttlMs":10000}`)
	s := e2e.OpenStream(t, c, "/v1/leases:watch?prefix=oi.&refresh=true", "")
	nextEvents(t, s, 1)

	post(t, other, "/v1/leases/oi.a:renew", `{"holder":"a","fencingToken":1}`)
	if l := nextRefresh(t, s, "oi.a"); !l.Held || l.RemainingMs < 9000 {
		t.Fatalf("refresh after another instance's renewal: %+v", l)
	}
	post(t, other, "/v1/leases/oi.a:release", `{"holder":"a","fencingToken":1}`)
	start := time.Now()
	e := parseSSE(t, s.Next(t))
	if e.String() != "oi.a/1/snapshot" || e.held {
		t.Fatalf("after another instance's release: %s (held %v), want a snapshot of the free lease", e, e.held)
	}
	if waited := time.Since(start); waited < httpapi.ReorderWait-200*time.Millisecond {
		t.Fatalf("the snapshot came after %v, before ReorderWait: an event on its way would have come after it", waited)
	}
	post(t, other, "/v1/leases/oi.a:acquire", `{"holder":"b","ttlMs":3000}`) // longer than ReorderWait
	if e := parseSSE(t, s.Next(t)); e.String() != "oi.a/2/snapshot" || !e.held || e.holder != "b" {
		t.Fatalf("after another instance's acquire: %s (held %v, holder %s), want a snapshot held by b", e, e.held, e.holder)
	}
	// b's holding runs out; no sweeper announces it here.
	if e := parseSSE(t, s.Next(t)); e.String() != "oi.a/2/snapshot" || e.held {
		t.Fatalf("after b's holding ran out: %s (held %v), want a snapshot of the free lease", e, e.held)
	}
}

// TestWatchPrefixRefreshShowsSuccession: a candidate's registration (a
// write, not an event) shows in a refresh: candidates, the best priority,
// the yield asked of the holding.
func TestWatchPrefixRefreshShowsSuccession(t *testing.T) {
	c := refreshService(t, memory.New())
	post(t, c, "/v1/leases/sc.a:acquire", `{"holder":"a","ttlMs":60000,"priority":1}`)
	s := e2e.OpenStream(t, c, "/v1/leases:watch?prefix=sc.&refresh=true", "")
	nextEvents(t, s, 1)
	b := startAcquire(t, c, "sc.a", `{"holder":"b","ttlMs":30000,"waitMs":30000,"priority":7,"preempt":true}`)
	l := nextRefresh(t, s, "sc.a")
	if l.Candidates != 1 || l.BestCandidatePriority == nil || *l.BestCandidatePriority != 7 || !l.YieldRequested || l.YieldTo != "b" ||
		l.Priority != 1 || !l.Held || l.Holder != "a" {
		t.Fatalf("refresh with a preempting candidate waiting: %+v", l)
	}
	post(t, c, "/v1/leases/sc.a:release", `{"holder":"a","fencingToken":1}`)
	if r := b.answer(t, 5*time.Second); r.Status != 200 || r.Holder() != "b" {
		t.Fatalf("b's acquire = %d %s", r.Status, r.Raw)
	}
}

// TestWatchPrefixRefreshReadGrants: the instance reads the prefix once for
// every caller, but a caller's refresh events carry only the leases it may
// read.
func TestWatchPrefixRefreshReadGrants(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	flows := e2e.Client{URL: srv.URL, Token: flowTok}
	carol := e2e.Client{URL: srv.URL, Token: carolTok}
	post(t, alice, "/v1/leases/team-a.r:acquire", `{"holder":"a","ttlMs":60000}`)
	post(t, flows, "/v1/leases/team-b.r:acquire", `{"holder":"f","ttlMs":60000}`)
	all := e2e.OpenStream(t, flows, "/v1/leases:watch?refresh=true", "")
	s := e2e.OpenStream(t, carol, "/v1/leases:watch?refresh=true", "")
	nextEvents(t, all, 2)
	nextEvents(t, s, 1)
	post(t, flows, "/v1/leases/team-b.r:renew", `{"holder":"f","fencingToken":1}`)
	nextRefresh(t, all, "team-b.r") // the scan has seen it
	post(t, alice, "/v1/leases/team-a.r:renew", `{"holder":"a","fencingToken":1}`)
	ev := s.Next(t)
	var body struct {
		Leases []refreshLease `json:"leases"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &body); ev.Event != "refresh" || err != nil || len(body.Leases) != 1 || body.Leases[0].Name != "team-a.r" {
		t.Fatalf("carol's stream: %s %s, want a refresh of team-a.r only", ev.Event, ev.Data)
	}
}

// TestWatchPrefixRefreshShowsSession: a holding held through a session
// (docs/contract.md §14) comes in refresh events with `session: true` and
// its window, `sessionWindowMs`; its remainingMs is the long session lease
// TTL the instance renews. A resume that changes the window shows the new
// one; a plain holding carries neither member.
func TestWatchPrefixRefreshShowsSession(t *testing.T) {
	c, m := refreshServiceManager(t, memory.New())
	ref := &lease.SessionRef{Key: strings.Repeat("5e", 32), Epoch: 1, Window: time.Second}
	if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: "ss.s", Holder: "agent", TTL: 30 * time.Second, Session: ref}); err != nil {
		t.Fatal(err)
	}
	post(t, c, "/v1/leases/ss.p:acquire", `{"holder":"plain","ttlMs":30000}`)
	s := e2e.OpenStream(t, c, "/v1/leases:watch?prefix=ss.&refresh=true", "")
	nextEvents(t, s, 2)

	// The instance renews the session's lease: a refresh, session-held.
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: "ss.s", Holder: "agent", FencingToken: 1, Session: ref}); err != nil {
		t.Fatal(err)
	}
	l := nextRefresh(t, s, "ss.s")
	if l.Session == nil || !*l.Session || l.SessionWindowMs == nil || *l.SessionWindowMs != 1000 || !l.Held || l.Holder != "agent" ||
		l.TTLMs != 30000 || l.RemainingMs < 25000 {
		t.Fatalf("refresh of a session-held holding: %+v (session %v, window %v), want session true, window 1000 ms, 30 s TTL", l, deref(l.Session), deref(l.SessionWindowMs))
	}

	// Another instance resumes the session with a 300 ms window.
	moved := lease.SessionRef{Key: ref.Key, Epoch: 2, Window: 300 * time.Millisecond}
	if _, err := m.TakeOver(t.Context(), lease.TakeOverRequest{Name: "ss.s", Holder: "agent", FencingToken: 1, TTL: 30 * time.Second, Session: moved}); err != nil {
		t.Fatal(err)
	}
	if l := nextRefresh(t, s, "ss.s"); l.SessionWindowMs == nil || *l.SessionWindowMs != 300 {
		t.Fatalf("refresh after a resume at 300 ms: %+v (window %v)", l, deref(l.SessionWindowMs))
	}

	// A plain holding's refresh has neither member.
	post(t, c, "/v1/leases/ss.p:renew", `{"holder":"plain","fencingToken":1}`)
	if l := nextRefresh(t, s, "ss.p"); l.Session != nil || l.SessionWindowMs != nil {
		t.Fatalf("refresh of a plain holding: %+v, want no session members", l)
	}
}

// deref shows a member a test decoded into a pointer: nil when absent.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
