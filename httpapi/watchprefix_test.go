package httpapi_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// prefixService serves the API over the memory backend with its changes
// going to events, as cmd/leasesvc wires them.
func prefixService(t *testing.T) (e2e.Client, *hub.Hub) {
	t.Helper()
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events, Heartbeat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.CloseStreams(); srv.Close() })
	return e2e.Client{URL: srv.URL}, events
}

// sseEvent is a parsed event of the prefix stream.
type sseEvent struct {
	id, typ, name, holder string
	token                 int64
	held                  bool
	prevExpired           *bool
}

func (e sseEvent) String() string { return fmt.Sprintf("%s/%d/%s", e.name, e.token, e.typ) }

func parseSSE(t *testing.T, ev e2e.SSE) sseEvent {
	t.Helper()
	var lease struct {
		Name         string `json:"name"`
		Holder       string `json:"holder"`
		FencingToken int64  `json:"fencingToken"`
		Held         bool   `json:"held"`
	}
	var body struct {
		Lease           json.RawMessage `json:"lease"`
		PreviousExpired *bool           `json:"previousExpired"`
	}
	raw := []byte(ev.Data)
	if ev.Event != "snapshot" {
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("event %s: %v: %s", ev.Event, err, ev.Data)
		}
		raw = body.Lease
	}
	if err := json.Unmarshal(raw, &lease); err != nil {
		t.Fatalf("event %s: %v: %s", ev.Event, err, ev.Data)
	}
	return sseEvent{id: ev.ID, typ: ev.Event, name: lease.Name, holder: lease.Holder, token: lease.FencingToken, held: lease.Held, prevExpired: body.PreviousExpired}
}

// nextEvents reads n events (heartbeats and comments skipped).
func nextEvents(t *testing.T, s *e2e.Stream, n int) []sseEvent {
	t.Helper()
	var out []sseEvent
	for len(out) < n {
		out = append(out, parseSSE(t, s.Next(t)))
	}
	return out
}

func ids(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.String())
	}
	return out
}

func post(t *testing.T, c e2e.Client, path, body string) e2e.Response {
	t.Helper()
	r := c.Post(t, path, body)
	if r.Status != http.StatusOK {
		t.Fatalf("POST %s = %d %s", path, r.Status, r.Raw)
	}
	return r
}

// TestWatchPrefixSnapshotThenChanges: the stream starts with one snapshot
// per lease under the prefix (and none of other prefixes), then carries
// every change of holding under it, with ids that only grow.
func TestWatchPrefixSnapshotThenChanges(t *testing.T) {
	c, _ := prefixService(t)
	post(t, c, "/v1/leases/team-a.x:acquire", `{"holder":"a","ttlMs":60000}`)
	post(t, c, "/v1/leases/team-a.y:acquire", `{"holder":"b","ttlMs":60000}`)
	post(t, c, "/v1/leases/team-a.y:release", `{"holder":"b","fencingToken":1}`)
	post(t, c, "/v1/leases/team-b.z:acquire", `{"holder":"c","ttlMs":60000}`)

	s := e2e.WatchPrefix(t, c, "team-a.", "")
	snap := nextEvents(t, s, 2)
	if got := ids(snap); !slices.Equal(got, []string{"team-a.x/1/snapshot", "team-a.y/1/snapshot"}) || !snap[0].held || snap[1].held {
		t.Fatalf("snapshot %v (held %v %v), want team-a.x held and team-a.y free", got, snap[0].held, snap[1].held)
	}
	post(t, c, "/v1/leases/team-b.z:release", `{"holder":"c","fencingToken":1}`) // not under the prefix
	post(t, c, "/v1/leases/team-a.y:acquire", `{"holder":"d","ttlMs":60000}`)
	post(t, c, "/v1/leases/team-a.x:release", `{"holder":"a","fencingToken":1}`)
	post(t, c, "/v1/leases/team-a.new:acquire", `{"holder":"e","ttlMs":60000}`)
	evs := nextEvents(t, s, 3)
	if got := ids(evs); !slices.Equal(got, []string{"team-a.y/2/acquired", "team-a.x/1/released", "team-a.new/1/acquired"}) {
		t.Fatalf("changes %v", got)
	}
	prev := ""
	for _, e := range append(snap, evs...) {
		if e.id == "" || (prev != "" && len(e.id) == len(prev) && e.id < prev) {
			t.Fatalf("event %s has id %q after %q: ids must be cursors that do not go back", e, e.id, prev)
		}
		prev = e.id
	}
}

// TestWatchPrefixResumeMissesNothing: a stream resumed with the
// Last-Event-ID of the last event it saw gets every change made while it
// was away, in order, not just the states they led to.
func TestWatchPrefixResumeMissesNothing(t *testing.T) {
	c, _ := prefixService(t)
	post(t, c, "/v1/leases/jobs.a:acquire", `{"holder":"a1","ttlMs":60000}`)
	s := e2e.WatchPrefix(t, c, "jobs.", "")
	first := nextEvents(t, s, 1)
	post(t, c, "/v1/leases/jobs.b:acquire", `{"holder":"b1","ttlMs":60000}`)
	seen := nextEvents(t, s, 1)
	s.Close()
	last := seen[0].id

	// Away: three hand-overs of jobs.a and one of jobs.b.
	for i := 1; i <= 3; i++ {
		post(t, c, "/v1/leases/jobs.a:release", fmt.Sprintf(`{"holder":"a%d","fencingToken":%d}`, i, i))
		post(t, c, "/v1/leases/jobs.a:acquire", fmt.Sprintf(`{"holder":"a%d","ttlMs":60000}`, i+1))
	}
	post(t, c, "/v1/leases/jobs.b:release", `{"holder":"b1","fencingToken":1}`)

	r := e2e.WatchPrefix(t, c, "jobs.", last)
	perLease := map[string][]string{}
	for _, e := range nextEvents(t, r, 9) {
		perLease[e.name] = append(perLease[e.name], e.String())
	}
	// The replay repeats what the client had (jobs.a/1/acquired,
	// jobs.b/1/acquired) and then everything after it, each lease's in
	// order; no snapshot is needed since the replay reached the current
	// state.
	wantA := []string{"jobs.a/1/acquired", "jobs.a/1/released", "jobs.a/2/acquired", "jobs.a/2/released", "jobs.a/3/acquired", "jobs.a/3/released", "jobs.a/4/acquired"}
	wantB := []string{"jobs.b/1/acquired", "jobs.b/1/released"}
	if !slices.Equal(perLease["jobs.a"], wantA) || !slices.Equal(perLease["jobs.b"], wantB) || len(perLease) != 2 {
		t.Fatalf("first=%v; resumed stream %v, want %v and %v", ids(first), perLease, wantA, wantB)
	}
	post(t, c, "/v1/leases/jobs.c:acquire", `{"holder":"c1","ttlMs":60000}`)
	if e := parseSSE(t, r.Next(t)); e.String() != "jobs.c/1/acquired" {
		t.Fatalf("live after the replay: %s, want jobs.c/1/acquired", e)
	}
}

// TestWatchPrefixHoldsBackOutOfOrder: events of other instances can arrive
// out of order (Pub/Sub orders per publisher only); the stream sends each
// lease's events in token order, holding an acquired event back until the
// release of the holding before it arrives, or ReorderWait passes.
func TestWatchPrefixHoldsBackOutOfOrder(t *testing.T) {
	c, events := prefixService(t)
	post(t, c, "/v1/leases/ord.a:acquire", `{"holder":"a","ttlMs":60000}`)
	s := e2e.WatchPrefix(t, c, "ord.", "")
	nextEvents(t, s, 1) // the snapshot: held by a, token 1
	now := time.Now()
	l := func(holder string, token int64, held bool) lease.Lease {
		exp := now.Add(time.Minute)
		if !held {
			exp = now
		}
		return lease.Lease{Record: lease.Record{Name: "ord.a", Holder: holder, FencingToken: token, TTL: time.Minute, AcquireTime: now, RenewTime: now, ExpireTime: exp}, ServerTime: now}
	}
	// As another instance would make them: a releases 1, b acquires 2,
	// b releases 2, c acquires 3, but they arrive 2-acquired first.
	events.Publish(lease.Event{Type: lease.EventAcquired, Lease: l("b", 2, true), PreviousHolder: "a", Time: now})
	events.Publish(lease.Event{Type: lease.EventAcquired, Lease: l("c", 3, true), PreviousHolder: "b", Time: now})
	events.Publish(lease.Event{Type: lease.EventReleased, Lease: l("a", 1, false), Time: now})
	events.Publish(lease.Event{Type: lease.EventReleased, Lease: l("b", 2, false), Time: now})
	got := ids(nextEvents(t, s, 4))
	want := []string{"ord.a/1/released", "ord.a/2/acquired", "ord.a/2/released", "ord.a/3/acquired"}
	if !slices.Equal(got, want) {
		t.Fatalf("stream %v, want %v", got, want)
	}
	// An end that never comes: the acquired event goes out after ReorderWait.
	start := time.Now()
	events.Publish(lease.Event{Type: lease.EventAcquired, Lease: l("d", 4, true), PreviousHolder: "c", Time: now})
	if e := parseSSE(t, s.Next(t)); e.String() != "ord.a/4/acquired" {
		t.Fatalf("got %s, want ord.a/4/acquired", e)
	}
	if waited := time.Since(start); waited < httpapi.ReorderWait-100*time.Millisecond {
		t.Fatalf("an acquired event whose predecessor's end was missing went out after %v, before ReorderWait", waited)
	}
}

// TestWatchPrefixHistory: with history=true, the kept recent events of the
// prefix follow the snapshot as history events.
func TestWatchPrefixHistory(t *testing.T) {
	c, _ := prefixService(t)
	post(t, c, "/v1/leases/h.a:acquire", `{"holder":"a","ttlMs":60000}`)
	post(t, c, "/v1/leases/h.a:release", `{"holder":"a","fencingToken":1}`)
	post(t, c, "/v1/leases/h.a:acquire", `{"holder":"b","ttlMs":60000}`)
	post(t, c, "/v1/leases/other:acquire", `{"holder":"x","ttlMs":60000}`)
	s := e2e.OpenStream(t, c, "/v1/leases:watch?prefix=h.&history=true", "")
	got := ids(nextEvents(t, s, 4))
	want := []string{"h.a/2/snapshot", "h.a/1/history", "h.a/1/history", "h.a/2/history"}
	if !slices.Equal(got, want) {
		t.Fatalf("stream %v, want %v", got, want)
	}
}

// TestWatchPrefixRequests: HEAD answers as GET does without a body; bad
// query parameters and a malformed Last-Event-ID are 400 naming the field.
func TestWatchPrefixRequests(t *testing.T) {
	c, _ := prefixService(t)
	resp, err := http.Head(c.URL + "/v1/leases:watch?prefix=a.")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, tc := range []struct{ query, lastID, field string }{
		{"?prefx=a", "", "prefx"},
		{"?prefix=-bad", "", "prefix"},
		{"?prefix=a&prefix=b", "", "prefix"},
		{"?history=maybe", "", "history"},
		{"?refresh=often", "", "refresh"},
		{"?refresh=true&refresh=true", "", "refresh"},
		{"?prefix=a", "jobs/1/acquired", "Last-Event-ID"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, c.URL+"/v1/leases:watch"+tc.query, nil)
		if tc.lastID != "" {
			req.Header.Set("Last-Event-ID", tc.lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Code       string `json:"code"`
			Violations []struct {
				Field string `json:"field"`
			} `json:"errors"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&p)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || p.Code != "invalid_argument" {
			t.Errorf("%s (Last-Event-ID %q) = %d %s, want 400 invalid_argument", tc.query, tc.lastID, resp.StatusCode, p.Code)
		}
		if len(p.Violations) == 0 || !strings.EqualFold(p.Violations[0].Field, tc.field) {
			t.Errorf("%s: violations %+v, want %s", tc.query, p.Violations, tc.field)
		}
	}
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			req, _ := http.NewRequestWithContext(t.Context(), m, c.URL+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
				t.Errorf("%s %s = %d (CSP %q)", m, path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
			}
		}
	}
}

// TestWatchPrefixReadGrants: a principal sees only the leases it may read,
// in the snapshot and in the changes; a prefix it can read nothing under
// is 403, and no credentials 401.
func TestWatchPrefixReadGrants(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	flows := e2e.Client{URL: srv.URL, Token: flowTok}
	carol := e2e.Client{URL: srv.URL, Token: carolTok}
	post(t, alice, "/v1/leases/team-a.one:acquire", `{"holder":"a","ttlMs":60000}`)
	post(t, flows, "/v1/leases/team-b.one:acquire", `{"holder":"f","ttlMs":60000}`)

	s := e2e.WatchPrefix(t, carol, "", "")
	if got := ids(nextEvents(t, s, 1)); !slices.Equal(got, []string{"team-a.one/1/snapshot"}) {
		t.Fatalf("carol's snapshot %v", got)
	}
	post(t, flows, "/v1/leases/team-b.two:acquire", `{"holder":"f","ttlMs":60000}`)
	post(t, flows, "/v1/leases/team-b.one:release", `{"holder":"f","fencingToken":1}`)
	post(t, alice, "/v1/leases/team-a.two:acquire", `{"holder":"a","ttlMs":60000}`)
	if got := ids(nextEvents(t, s, 1)); !slices.Equal(got, []string{"team-a.two/1/acquired"}) {
		t.Fatalf("carol saw %v, want only team-a.two/1/acquired", got)
	}
	// The same filtering on a resume.
	r := e2e.WatchPrefix(t, carol, "", "1")
	for _, e := range nextEvents(t, r, 2) {
		if !strings.HasPrefix(e.name, "team-a.") {
			t.Fatalf("carol's resumed stream carries %s", e)
		}
	}
	if got := alice.Get(t, "/v1/leases:watch?prefix=team-b."); got.Status != http.StatusForbidden || got.Code() != "permission_denied" {
		t.Fatalf("alice on team-b. = %d %s, want 403", got.Status, got.Raw)
	}
	if got := (e2e.Client{URL: srv.URL}).Get(t, "/v1/leases:watch?prefix=team-a."); got.Status != http.StatusUnauthorized {
		t.Fatalf("no token = %d, want 401", got.Status)
	}
}

// TestWatchLeaseResume: a lease's stream resumed with the Last-Event-ID of
// its last event replays the kept events after it, then the lease now.
func TestWatchLeaseResume(t *testing.T) {
	c, _ := prefixService(t)
	post(t, c, "/v1/leases/one:acquire", `{"holder":"a","ttlMs":60000}`)
	post(t, c, "/v1/leases/one:release", `{"holder":"a","fencingToken":1}`)
	post(t, c, "/v1/leases/one:acquire", `{"holder":"b","ttlMs":60000}`)
	s := e2e.OpenStream(t, c, "/v1/leases/one:watch", "one/1/released")
	var got []string
	for range 2 {
		ev := s.Next(t)
		got = append(got, ev.Event+" "+ev.ID)
	}
	if want := []string{"acquired one/2/acquired", "lease "}; !slices.Equal(got, want) {
		t.Fatalf("resumed lease stream %q, want %q", got, want)
	}
}
