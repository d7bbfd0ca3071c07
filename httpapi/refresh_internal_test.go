package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// countingStore counts the backend's List calls.
type countingStore struct {
	backend.Store
	lists atomic.Int64
}

func (s *countingStore) List(ctx context.Context, prefix, after string, limit int) ([]backend.Row, time.Time, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, prefix, after, limit)
}

func refreshHandler(t *testing.T, store backend.Store, every time.Duration) *Handler {
	t.Helper()
	m, err := lease.NewManager(store, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(m, Config{Logger: slog.New(slog.DiscardHandler), Limits: Limits{StreamRefresh: every}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.CloseStreams)
	return h
}

// TestRefreshScanIsSharedPerPrefix: every stream of a prefix shares one
// paced read of it (one List per scan, however many streams), another
// prefix has its own, and the read stops with the prefix's last stream.
func TestRefreshScanIsSharedPerPrefix(t *testing.T) { synctest.Test(t, refreshScanIsSharedPerPrefix) }

// refreshScanIsSharedPerPrefix is TestRefreshScanIsSharedPerPrefix's body, run in a synctest bubble: fake time.
func refreshScanIsSharedPerPrefix(t *testing.T) {
	store := &countingStore{Store: memory.New()}
	h := refreshHandler(t, store, 20*time.Millisecond)
	rs := h.api.refresh
	var subs []*refreshSub
	for range 5 {
		s, _ := rs.subscribe("p.")
		subs = append(subs, s)
	}
	other, _ := rs.subscribe("q.")
	r := subs[0].r
	for _, s := range subs {
		if s.r != r {
			t.Fatal("two streams of one prefix got different refreshers")
		}
	}
	if other.r == r {
		t.Fatal("two prefixes share a refresher")
	}
	other.close()
	elapse(5 * 20 * time.Millisecond) // five intervals
	r.mu.Lock()
	gen := r.gen
	r.mu.Unlock()
	if gen < 5 {
		t.Fatalf("%d scans in five intervals, want 5", gen)
	}
	for _, s := range subs {
		s.close()
	}
	rs.mu.Lock()
	left := len(rs.by)
	rs.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d refreshers left after their streams closed", left)
	}
	r.mu.Lock()
	gen = r.gen
	r.mu.Unlock()
	// One List per scan of p. (each fits a page), at most one more in
	// flight, and q.'s few: not one per stream.
	n := store.lists.Load()
	if n > int64(gen)+4 {
		t.Fatalf("%d List calls for %d scans of p. with 5 streams: the streams do not share the scan", n, gen)
	}
	elapse(5 * 20 * time.Millisecond) // five intervals: a scan still running would list again
	if m := store.lists.Load(); m != n {
		t.Fatalf("the scans went on after the last stream closed: %d → %d List calls", n, m)
	}
}

// TestRefreshOff: a negative StreamRefresh turns refresh off: a stream
// that asks for it gets no refresher.
func TestRefreshOff(t *testing.T) {
	h := refreshHandler(t, memory.New(), StreamRefreshOff)
	if s, ok := h.api.refresh.subscribe("p."); s != nil || !ok {
		t.Fatal("refresh off, but subscribe started a refresher")
	}
	if h := refreshHandler(t, memory.New(), 0); h.api.refresh.interval != DefaultStreamRefresh {
		t.Fatalf("zero StreamRefresh: interval %v, want the default %v", h.api.refresh.interval, DefaultStreamRefresh)
	}
}

// TestRefreshEventMatchesOpenAPI: every member a refresh event's lease can
// carry is in the OpenAPI document's RefreshedLease, and its required ones
// are always there.
func TestRefreshEventMatchesOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	schema, ok := doc.Components.Schemas["RefreshedLease"]
	if !ok {
		t.Fatal("no RefreshedLease schema")
	}
	best := 3
	full, _ := json.Marshal(refreshLease{Name: "a", FencingToken: 1, Holder: "h", Held: true, RemainingMs: 1, TTLMs: 1000, Priority: 1,
		ReservedFor: "b", ReservedUntil: "2026-01-01T00:00:00Z", YieldRequested: true, YieldTo: "c", Candidates: 1, BestCandidatePriority: &best,
		Session: true, SessionWindowMs: 1000})
	empty, _ := json.Marshal(refreshLease{})
	var fm, em map[string]any
	_ = json.Unmarshal(full, &fm)
	_ = json.Unmarshal(empty, &em)
	for k := range fm {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("refresh member %q is not in the OpenAPI RefreshedLease", k)
		}
	}
	for k := range schema.Properties {
		if _, ok := fm[k]; !ok {
			t.Errorf("OpenAPI RefreshedLease has %q, which a refresh never carries", k)
		}
	}
	for _, k := range schema.Required {
		if _, ok := em[k]; !ok {
			t.Errorf("required member %q is absent from an empty refresh entry", k)
		}
	}
}

// TestRefreshPrefixesCap: the instance re-reads at most RefreshPrefixes
// prefixes at once; a stream asking for refresh of another is 429
// resource_exhausted with Retry-After, a stream of a prefix already
// re-read joins it, and a closed prefix frees its place.
func TestRefreshPrefixesCap(t *testing.T) {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(m, Config{Logger: slog.New(slog.DiscardHandler), Limits: Limits{StreamRefresh: time.Hour, RefreshPrefixes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.CloseStreams)
	rs := h.api.refresh
	a, okA := rs.subscribe("a.")
	b, okB := rs.subscribe("b.")
	if !okA || !okB {
		t.Fatal("the first two prefixes were refused")
	}
	if _, ok := rs.subscribe("c."); ok {
		t.Fatal("a third prefix was refreshed beyond RefreshPrefixes 2")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://localhost/v1/leases:watch?prefix=c.&refresh=true", nil)) // a loopback Host: authentication is off
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "resource_exhausted") || w.Header().Get("Retry-After") == "" {
		t.Fatalf("refresh of a third prefix = %d %s (Retry-After %q), want 429 resource_exhausted", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
	a2, ok := rs.subscribe("a.")
	if !ok || a2.r != a.r {
		t.Fatal("a second stream of a refreshed prefix did not join it")
	}
	a.close()
	a2.close()
	c, ok := rs.subscribe("c.")
	if !ok {
		t.Fatal("a prefix closed, but another still cannot be refreshed")
	}
	b.close()
	c.close()
}

// elapse lets d of fake time pass in a synctest bubble, then waits until
// every goroutine of the bubble is blocked: what d brings has happened.
func elapse(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}
