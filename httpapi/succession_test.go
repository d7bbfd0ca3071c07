package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// succInstance serves the API over store, with the Manager's events wired
// to its watch streams, as one instance of the service. Two instances over
// one store share no events: a waiter on one is not woken by a release on
// the other until its expiry timer or a Wake.
func succInstance(t *testing.T, store backend.Store) (e2e.Client, *lease.Manager) {
	t.Helper()
	return succInstanceWith(t, store, lease.Config{})
}

// succInstanceWith is succInstance with the Manager's cfg (OnChange is set
// here).
func succInstanceWith(t *testing.T, store backend.Store, cfg lease.Config) (e2e.Client, *lease.Manager) {
	t.Helper()
	events := hub.New()
	cfg.OnChange = events.Publish
	waits := newWaitNotes()
	cfg.OnWait = waits.note
	m, err := lease.NewManager(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitsOf.Store(m, waits)
	h, err := httpapi.New(m, httpapi.Config{Events: events, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return e2e.Client{URL: srv.URL}, m
}

// pending is an acquire in flight (a waiting one), answered on done.
type pending struct {
	done   chan e2e.Response
	cancel context.CancelFunc
}

// startAcquire sends an acquire of name with body in the background; cancel
// disconnects it (it also ends with the test).
func startAcquire(t *testing.T, c e2e.Client, name, body string) *pending {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	p := &pending{done: make(chan e2e.Response, 1), cancel: cancel}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/leases/"+name+":acquire", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			p.done <- e2e.Response{Status: -1, Raw: err.Error()}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		out := e2e.Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
		_ = json.Unmarshal(raw, &out.Body)
		p.done <- out
	}()
	return p
}

// answer returns the acquire's answer, failing the test after d.
func (p *pending) answer(t *testing.T, d time.Duration) e2e.Response {
	t.Helper()
	select {
	case r := <-p.done:
		return r
	case <-time.After(d):
		t.Fatalf("the acquire did not answer within %v", d)
	}
	return e2e.Response{}
}

// pendingFor reports whether the acquire is still unanswered after d; an
// answer before then ends the wait at once.
func (p *pending) pendingFor(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-p.done:
		p.done <- r // keep the answer for answer
		return false
	case <-timer.C:
		return true
	}
}

// candidates returns the lease's candidates member (0 when absent).
func candidates(t *testing.T, c e2e.Client, name string) int {
	t.Helper()
	r := c.Get(t, "/v1/leases/"+name)
	n, _ := r.Body["candidates"].(float64)
	return int(n)
}

// waitCandidates waits until the lease shows n registered candidates.
func waitCandidates(t *testing.T, c e2e.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for candidates(t, c, name) != n {
		if time.Now().After(deadline) {
			t.Fatalf("lease %s: candidates %d, want %d", name, candidates(t, c, name), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stable is the stored state of a lease as an answer shows it, without
// what changes with the time of reading.
func stable(r e2e.Response) map[string]any {
	out := maps.Clone(r.Lease())
	delete(out, "serverTime")
	delete(out, "remainingMs")
	return out
}

// checkpointOf returns the lease's checkpoint as compact JSON ("" if absent).
func checkpointOf(r e2e.Response) string {
	cp, ok := r.Lease()["checkpoint"]
	if !ok {
		return ""
	}
	b, _ := json.Marshal(cp)
	return string(b)
}

// TestSuccessionRefusesBadInput: every bad succession field is 400
// invalid_argument naming it, and changes nothing (no candidate registered,
// no holding ended, no checkpoint written).
func TestSuccessionRefusesBadInput(t *testing.T) {
	c, _ := succInstance(t, memory.New())
	p := "/v1/leases/succ-bad"
	if r := c.Post(t, p+":acquire", `{"holder":"h","ttlMs":60000}`); r.Status != 200 || r.Token() != 1 {
		t.Fatalf("acquire = %d %s", r.Status, r.Raw)
	}
	if r := c.Post(t, p+":renew", `{"holder":"h","fencingToken":1,"checkpoint":{"step":1}}`); r.Status != 200 || checkpointOf(r) != `{"step":1}` {
		t.Fatalf("renew with a checkpoint = %d %s", r.Status, r.Raw)
	}
	before := stable(c.Get(t, p))
	big := `{"k":"` + strings.Repeat("x", lease.MaxCheckpointBytes) + `"}`
	for _, tc := range []struct{ verb, body, field string }{
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":1000,"priority":-1}`, "priority"},
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":1000,"priority":1001}`, "priority"},
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":1000,"priority":"x"}`, "priority"},
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":1000,"priority":1.5}`, "priority"},
		{"acquire", `{"holder":"o","ttlMs":1000,"priority":null}`, "priority"},
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":1000,"priority":5,"preempt":"yes"}`, "preempt"},
		{"acquire", `{"holder":"o","ttlMs":1000,"priority":5,"preempt":true}`, "preempt"},
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":0,"priority":5,"preempt":true}`, "preempt"},
		{"acquire", `{"holder":"o","ttlMs":1000,"waitMs":1000,"checkpoint":{}}`, "checkpoint"},
		{"renew", `{"holder":"h","fencingToken":1,"checkpoint":"x"}`, "checkpoint"},
		{"renew", `{"holder":"h","fencingToken":1,"checkpoint":[1]}`, "checkpoint"},
		{"renew", `{"holder":"h","fencingToken":1,"checkpoint":null}`, "checkpoint"},
		{"renew", `{"holder":"h","fencingToken":1,"checkpoint":` + big + `}`, "checkpoint"},
		{"renew", `{"holder":"h","fencingToken":1,"priority":3}`, "priority"},
		{"release", `{"holder":"h","fencingToken":1,"checkpoint":5}`, "checkpoint"},
		{"release", `{"holder":"h","fencingToken":1,"checkpoint":` + big + `}`, "checkpoint"},
		{"transfer", `{"holder":"h","fencingToken":1}`, "to"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":""}`, "to"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"h"}`, "to"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":7}`, "to"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","reserveMs":0}`, "reserveMs"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","reserveMs":-5}`, "reserveMs"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","reserveMs":60001}`, "reserveMs"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","reserveMs":1.5}`, "reserveMs"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","successor":"b"}`, "successor"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","toPrincipal":"bob@example.com"}`, "toPrincipal"}, // no authentication: no principal to name
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","checkpoint":"x"}`, "checkpoint"},
		{"transfer", `{"holder":"h","fencingToken":1,"to":"b","checkpoint":` + big + `}`, "checkpoint"},
		{"transfer", `{"holder":"h","to":"b"}`, "fencingToken"},
		{"transfer", `{"fencingToken":1,"to":"b"}`, "holder"},
	} {
		r := c.Post(t, p+":"+tc.verb, tc.body)
		if r.Status != 400 || r.Code() != "invalid_argument" || !strings.Contains(r.Raw, `"field":"`+tc.field+`"`) {
			t.Errorf("%s %.120s = %d %.300s, want 400 naming %s", tc.verb, tc.body, r.Status, r.Raw, tc.field)
		}
	}
	after := stable(c.Get(t, p))
	if !mapsEqual(before, after) {
		t.Fatalf("refused requests changed the lease:\nbefore %v\nafter  %v", before, after)
	}
	if _, ok := after["candidates"]; ok {
		t.Fatalf("a refused waiting acquire registered a candidate: %v", after)
	}
}

func mapsEqual(a, b map[string]any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestLeaseReservedForTheBestCandidate: when a holding ends while a
// candidate (a waiting acquire with a priority) waits on another instance,
// the free lease is reserved for it: anyone else's acquire is 409
// lease_reserved with the lease, reservedFor, reservedUntil and a
// Retry-After of at most the 5 s window; the candidate then gets the lease
// with the next token.
func TestLeaseReservedForTheBestCandidate(t *testing.T) {
	store := memory.New()
	c1, _ := succInstance(t, store)
	c2, m2 := succInstance(t, store)
	name := "succ-reserved"
	p := "/v1/leases/" + name
	if r := c1.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`); r.Status != 200 || r.Token() != 1 {
		t.Fatalf("a's acquire = %d %s", r.Status, r.Raw)
	}
	// b waits on the second instance, which hears nothing of the first: it
	// sleeps until a's expiry unless woken.
	b := startAcquire(t, c2, name, `{"holder":"b","ttlMs":30000,"waitMs":30000,"priority":5}`)
	waitCandidates(t, c1, name, 1)
	if r := c1.Post(t, p+":release", `{"holder":"a","fencingToken":1}`); r.Status != 200 || r.Body["held"] != false ||
		r.Body["reservedFor"] != "b" || r.Body["reservedUntil"] == nil || r.Body["candidates"] != 1.0 || r.Body["bestCandidatePriority"] != 5.0 {
		t.Fatalf("a's release = %d %s, want not held, reserved for b, one candidate of priority 5", r.Status, r.Raw)
	}
	r := c1.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000}`)
	if r.Status != 409 || r.Code() != "lease_reserved" || r.Body["type"] != "urn:leasesvc:problem:lease_reserved" ||
		r.Header.Get("Content-Type") != "application/problem+json" || r.Body["reservedFor"] != "b" {
		t.Fatalf("c's acquire of the reserved lease = %d %s, want 409 lease_reserved for b", r.Status, r.Raw)
	}
	l := r.Lease()
	if l["holder"] != "a" || l["fencingToken"] != 1.0 || l["held"] != false || l["reservedFor"] != "b" {
		t.Fatalf("lease_reserved's lease = %v, want a's ended holding, reserved for b", l)
	}
	until, err := time.Parse(time.RFC3339Nano, r.Body["reservedUntil"].(string))
	if err != nil {
		t.Fatalf("reservedUntil %v: %v", r.Body["reservedUntil"], err)
	}
	expire, _ := time.Parse(time.RFC3339Nano, l["expireTime"].(string))
	if w := until.Sub(expire); w <= 0 || w > lease.ReserveWindow {
		t.Fatalf("reservedUntil − expireTime = %v, want in (0, %v]", w, lease.ReserveWindow)
	}
	if l["reservedUntil"] != r.Body["reservedUntil"] {
		t.Fatalf("the problem's reservedUntil %v differs from its lease's %v", r.Body["reservedUntil"], l["reservedUntil"])
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 5 {
		t.Fatalf("Retry-After %q, want 1…5", r.Header.Get("Retry-After"))
	}
	// A waiting acquire without a priority is refused the same way when its
	// wait runs out, and registers nothing.
	if r := c1.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000,"waitMs":100}`); r.Status != 409 || r.Code() != "lease_reserved" {
		t.Fatalf("c's waiting acquire = %d %s, want 409 lease_reserved when its wait runs out", r.Status, r.Raw)
	}
	if !b.pendingFor(50 * time.Millisecond) {
		t.Fatal("b's wait ended before it was woken")
	}
	m2.Wake(name) // as the event relay would
	got := b.answer(t, 5*time.Second)
	if got.Status != 200 || got.Holder() != "b" || got.Token() != 2 || got.Body["priority"] != 5.0 ||
		got.Body["reservedFor"] != nil || got.Body["candidates"] != nil || got.Body["bestCandidatePriority"] != nil {
		t.Fatalf("b's waiting acquire = %d %s, want 200, token 2, priority 5, no reservation or candidate left", got.Status, got.Raw)
	}
}

// TestTransferHandsOverWithCheckpoint: the holder's :transfer ends its
// holding, reserves the lease for the successor (others get
// lease_reserved), and the successor's acquire gets the next token with
// the checkpoint; a repeat is idempotent, a non-holder's transfer is
// lease_lost, the watch stream shows released with successor, and a
// reservation nobody takes lapses at reserveMs.
func TestTransferHandsOverWithCheckpoint(t *testing.T) {
	clock := memory.NewManualClock(time.Now()) // the backend's: reservations lapse on it
	c, _ := succInstance(t, memory.New(memory.WithClock(clock.Now)))
	name := "succ-transfer"
	p := "/v1/leases/" + name
	if r := c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`); r.Status != 200 {
		t.Fatalf("a's acquire = %d %s", r.Status, r.Raw)
	}
	watch := e2e.Watch(t, c.URL, name)
	if ev := watch.Next(t); ev.Event != "lease" {
		t.Fatalf("first watch event %+v, want lease", ev)
	}
	for _, bad := range []struct{ who, body string }{
		{"another holder", `{"holder":"c","fencingToken":1,"to":"b"}`},
		{"a wrong token", `{"holder":"a","fencingToken":2,"to":"b"}`},
	} {
		if r := c.Post(t, p+":transfer", bad.body); r.Status != 409 || r.Code() != "lease_lost" {
			t.Fatalf("transfer by %s = %d %s, want 409 lease_lost", bad.who, r.Status, r.Raw)
		}
	}
	if r := c.Post(t, "/v1/leases/succ-never:transfer", `{"holder":"a","fencingToken":1,"to":"b"}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("transfer of a lease that never existed = %d %s, want 409 lease_lost", r.Status, r.Raw)
	}
	tr := c.Post(t, p+":transfer", `{"holder":"a","fencingToken":1,"to":"b","checkpoint":{"step": 7, "of":[1, 2]},"reserveMs":10000}`)
	if tr.Status != 200 || tr.Body["held"] != false || tr.Token() != 1 || tr.Body["reservedFor"] != "b" ||
		checkpointOf(tr) != `{"of":[1,2],"step":7}` || tr.Body["checkpointToken"] != 1.0 || tr.Body["expireTime"] != tr.Body["serverTime"] {
		t.Fatalf("a's transfer = %d %s, want not held, reserved for b, the checkpoint with token 1", tr.Status, tr.Raw)
	}
	until, _ := time.Parse(time.RFC3339Nano, tr.Body["reservedUntil"].(string))
	expire, _ := time.Parse(time.RFC3339Nano, tr.Body["expireTime"].(string))
	if w := until.Sub(expire); w != 10*time.Second {
		t.Fatalf("reservedUntil − expireTime = %v, want reserveMs 10 s", w)
	}
	ev := watch.Next(t)
	var data map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &data); err != nil || ev.Event != "released" || ev.ID != name+"/1/released" || data["successor"] != "b" {
		t.Fatalf("watch event after the transfer = %+v (%v), want released with successor b", ev, err)
	}
	if l, _ := data["lease"].(map[string]any); l == nil || l["checkpoint"] != nil || l["reservedFor"] != "b" {
		t.Fatalf("the released event's lease = %v, want reserved for b and no checkpoint", data["lease"])
	}
	again := c.Post(t, p+":transfer", `{"holder":"a","fencingToken":1,"to":"b","reserveMs":10000}`)
	if again.Status != 200 || again.Body["expireTime"] != tr.Body["expireTime"] || again.Body["reservedUntil"] != tr.Body["reservedUntil"] || checkpointOf(again) != checkpointOf(tr) {
		t.Fatalf("repeated transfer = %d %s, want 200 and the lease unchanged (%s)", again.Status, again.Raw, tr.Raw)
	}
	if r := c.Post(t, p+":transfer", `{"holder":"a","fencingToken":1,"to":"d"}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("a transfer of the ended holding to another successor = %d %s, want 409 lease_lost", r.Status, r.Raw)
	}
	r := c.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000}`)
	if r.Status != 409 || r.Code() != "lease_reserved" || r.Body["reservedFor"] != "b" || r.Body["reservedUntil"] != tr.Body["reservedUntil"] {
		t.Fatalf("c's acquire during the transfer's reservation = %d %s, want 409 lease_reserved for b", r.Status, r.Raw)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
		t.Fatalf("Retry-After %q, want 1…10", r.Header.Get("Retry-After"))
	}
	got := c.Post(t, p+":acquire", `{"holder":"b","ttlMs":30000}`)
	if got.Status != 200 || got.Token() != 2 || got.Holder() != "b" || checkpointOf(got) != `{"of":[1,2],"step":7}` ||
		got.Body["checkpointToken"] != 1.0 || got.Body["reservedFor"] != nil {
		t.Fatalf("b's acquire = %d %s, want token 2 with a's checkpoint and checkpointToken 1", got.Status, got.Raw)
	}
	if ev := watch.Next(t); ev.Event != "acquired" || ev.ID != name+"/2/acquired" || !strings.Contains(ev.Data, `"previousHolder":"a"`) {
		t.Fatalf("watch event after b's acquire = %+v, want acquired token 2 (and no second released)", ev)
	}
	if r := c.Post(t, p+":transfer", `{"holder":"a","fencingToken":1,"to":"b","reserveMs":10000}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("a's transfer again after b acquired = %d %s, want 409 lease_lost", r.Status, r.Raw)
	}
	// A reservation nobody takes lapses at reserveMs; the checkpoint stays.
	if r := c.Post(t, p+":transfer", `{"holder":"b","fencingToken":2,"to":"d","reserveMs":200}`); r.Status != 200 || r.Body["reservedFor"] != "d" {
		t.Fatalf("b's transfer to d = %d %s", r.Status, r.Raw)
	}
	if r := c.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000}`); r.Status != 409 || r.Code() != "lease_reserved" {
		t.Fatalf("c's acquire during d's reservation = %d %s, want lease_reserved", r.Status, r.Raw)
	}
	clock.Advance(199 * time.Millisecond)
	if r := c.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000}`); r.Status != 409 || r.Code() != "lease_reserved" {
		t.Fatalf("c's acquire 1 ms before d's reservation lapses = %d %s, want lease_reserved", r.Status, r.Raw)
	}
	clock.Advance(time.Millisecond) // reserveMs 200 have passed
	if r := c.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000}`); r.Status != 200 || r.Token() != 3 || checkpointOf(r) != `{"of":[1,2],"step":7}` {
		t.Fatalf("c's acquire after the reservation lapsed = %d %s, want token 3 with the checkpoint", r.Status, r.Raw)
	}
}

// TestCheckpointOutlivesTheHolding: a checkpoint written with renew is in
// the next holder's acquire answer after the holding expired; one written
// with release, and with a repeated release of that ended holding, after a
// release. Only the current holding writes it.
func TestCheckpointOutlivesTheHolding(t *testing.T) {
	clock := memory.NewManualClock(time.Now()) // the backend's: holdings expire on it
	c, _ := succInstance(t, memory.New(memory.WithClock(clock.Now)))
	p := "/v1/leases/succ-checkpoint"
	if r := c.Post(t, p+":acquire", `{"holder":"a","ttlMs":1000}`); r.Status != 200 || r.Body["checkpoint"] != nil {
		t.Fatalf("a's acquire = %d %s, want no checkpoint yet", r.Status, r.Raw)
	}
	for i, cp := range []string{`{"n":1}`, `{"n":2}`} {
		r := c.Post(t, p+":renew", `{"holder":"a","fencingToken":1,"checkpoint":`+cp+`}`)
		if r.Status != 200 || checkpointOf(r) != cp || r.Body["checkpointToken"] != 1.0 {
			t.Fatalf("renew %d with checkpoint %s = %d %s", i, cp, r.Status, r.Raw)
		}
	}
	if r := c.Post(t, p+":renew", `{"holder":"a","fencingToken":1}`); r.Status != 200 || checkpointOf(r) != `{"n":2}` {
		t.Fatalf("renew without a checkpoint = %d %s, want the checkpoint kept", r.Status, r.Raw)
	}
	if r := c.Post(t, p+":renew", `{"holder":"x","fencingToken":1,"checkpoint":{"n":99}}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("another holder's renew with a checkpoint = %d %s, want lease_lost", r.Status, r.Raw)
	}
	clock.Advance(time.Second) // a's holding (ttlMs 1000) runs out
	if r := c.Post(t, p+":renew", `{"holder":"a","fencingToken":1,"checkpoint":{"n":98}}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("renew of the expired holding with a checkpoint = %d %s, want lease_lost", r.Status, r.Raw)
	}
	b := c.Post(t, p+":acquire", `{"holder":"b","ttlMs":30000}`)
	if b.Status != 200 || b.Token() != 2 || checkpointOf(b) != `{"n":2}` || b.Body["checkpointToken"] != 1.0 {
		t.Fatalf("b's acquire after a expired = %d %s, want token 2 with a's last checkpoint {\"n\":2}, checkpointToken 1", b.Status, b.Raw)
	}
	if r := c.Post(t, p+":release", `{"holder":"b","fencingToken":2,"checkpoint":{"n":3}}`); r.Status != 200 || checkpointOf(r) != `{"n":3}` || r.Body["checkpointToken"] != 2.0 {
		t.Fatalf("b's release with a checkpoint = %d %s", r.Status, r.Raw)
	}
	if r := c.Post(t, p+":release", `{"holder":"b","fencingToken":2,"checkpoint":{"n":4}}`); r.Status != 200 || checkpointOf(r) != `{"n":4}` {
		t.Fatalf("b's repeated release with a checkpoint = %d %s, want it written (nobody acquired since)", r.Status, r.Raw)
	}
	if r := c.Post(t, p+":release", `{"holder":"a","fencingToken":1,"checkpoint":{"n":97}}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("a's release of its old holding with a checkpoint = %d %s, want lease_lost", r.Status, r.Raw)
	}
	cr := c.Post(t, p+":acquire", `{"holder":"c","ttlMs":30000}`)
	if cr.Status != 200 || cr.Token() != 3 || checkpointOf(cr) != `{"n":4}` || cr.Body["checkpointToken"] != 2.0 {
		t.Fatalf("c's acquire after b released = %d %s, want token 3 with b's checkpoint {\"n\":4}, checkpointToken 2", cr.Status, cr.Raw)
	}
	if r := c.Post(t, p+":release", `{"holder":"b","fencingToken":2,"checkpoint":{"n":5}}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("b's release after c acquired = %d %s, want lease_lost", r.Status, r.Raw)
	}
	if r := c.Get(t, p); checkpointOf(r) != `{"n":4}` {
		t.Fatalf("lease after refused checkpoint writes = %s, want checkpoint {\"n\":4}", r.Raw)
	}
}

// TestRenewAnswersYieldRequested: the holder's renewals ask it to step down
// for the best live candidate that asked to preempt with a strictly higher
// priority, and for no other; when the holding ends the best candidate (by
// priority, preempt or not) gets the lease; candidates that disconnect are
// unregistered.
func TestRenewAnswersYieldRequested(t *testing.T) {
	c, _ := succInstance(t, memory.New())
	name := "succ-yield"
	p := "/v1/leases/" + name
	if r := c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000,"priority":5}`); r.Status != 200 || r.Body["priority"] != 5.0 {
		t.Fatalf("a's acquire = %d %s, want priority 5 recorded", r.Status, r.Raw)
	}
	renew := func(step string, yieldTo string) {
		t.Helper()
		r := c.Post(t, p+":renew", `{"holder":"a","fencingToken":1}`)
		if r.Status != 200 {
			t.Fatalf("%s: renew = %d %s", step, r.Status, r.Raw)
		}
		if yieldTo == "" && (r.Body["yieldRequested"] != nil || r.Body["yieldTo"] != nil) {
			t.Fatalf("%s: renew = %s, want no yield request", step, r.Raw)
		}
		if yieldTo != "" && (r.Body["yieldRequested"] != true || r.Body["yieldTo"] != yieldTo) {
			t.Fatalf("%s: renew = %s, want yieldRequested true, yieldTo %s", step, r.Raw, yieldTo)
		}
	}
	renew("no candidates", "")
	lower := startAcquire(t, c, name, `{"holder":"p3","ttlMs":30000,"waitMs":30000,"priority":3,"preempt":true}`)
	waitCandidates(t, c, name, 1)
	renew("a preempting candidate of lower priority", "")
	equal := startAcquire(t, c, name, `{"holder":"p5","ttlMs":30000,"waitMs":30000,"priority":5,"preempt":true}`)
	waitCandidates(t, c, name, 2)
	renew("a preempting candidate of the same priority", "")
	calm := startAcquire(t, c, name, `{"holder":"n9","ttlMs":30000,"waitMs":30000,"priority":9}`)
	waitCandidates(t, c, name, 3)
	renew("a higher candidate that does not preempt", "")
	q7 := startAcquire(t, c, name, `{"holder":"q7","ttlMs":30000,"waitMs":30000,"priority":7,"preempt":true}`)
	waitCandidates(t, c, name, 4)
	renew("a preempting candidate of priority 7", "q7")
	r8 := startAcquire(t, c, name, `{"holder":"r8","ttlMs":30000,"waitMs":30000,"priority":8,"preempt":true}`)
	waitCandidates(t, c, name, 5)
	renew("preempting candidates of priority 7 and 8", "r8")
	if r := c.Get(t, p); r.Body["yieldTo"] != "r8" || r.Body["candidates"] != 5.0 {
		t.Fatalf("get = %s, want yieldTo r8 and 5 candidates", r.Raw)
	}
	r8.cancel()
	waitCandidates(t, c, name, 4)
	renew("r8 gone", "q7")

	if r := c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`); r.Status != 200 {
		t.Fatalf("a's release = %d %s", r.Status, r.Raw)
	}
	got := calm.answer(t, 5*time.Second)
	if got.Status != 200 || got.Holder() != "n9" || got.Token() != 2 || got.Body["priority"] != 9.0 || got.Body["yieldRequested"] != nil || got.Body["candidates"] != 3.0 {
		t.Fatalf("n9's acquire = %d %s, want the lease (token 2, priority 9), no yield request, 3 candidates left", got.Status, got.Raw)
	}
	for _, w := range []*pending{lower, equal, q7} {
		if !w.pendingFor(0) {
			t.Fatalf("a lower candidate was answered: %s", (<-w.done).Raw)
		}
		w.cancel()
	}
	waitCandidates(t, c, name, 0)
}

// oldLeaseKeys are the members of a lease before succession; a caller that
// never sends a succession field sees no others.
var oldLeaseKeys = []string{"name", "holder", "fencingToken", "ttlMs", "acquireTime", "renewTime", "expireTime",
	"held", "remainingMs", "serverTime", "transitions", "metadata"}

// TestWithoutPriorityTheContractIsUnchanged: callers that send no
// succession field see no succession member, in answers, problems or
// events, and a plain waiting acquire is not registered as a candidate.
func TestWithoutPriorityTheContractIsUnchanged(t *testing.T) {
	c, m := succInstance(t, memory.New())
	name := "succ-plain"
	p := "/v1/leases/" + name
	watch := e2e.Watch(t, c.URL, name)
	watch.Next(t)
	check := func(step string, r e2e.Response, status int) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s = %d %s, want %d", step, r.Status, r.Raw, status)
		}
		for k := range r.Lease() {
			if !slices.Contains(oldLeaseKeys, k) {
				t.Fatalf("%s: the lease has %q: %s", step, k, r.Raw)
			}
		}
		if r.Status >= 400 {
			for k := range r.Body {
				if !slices.Contains([]string{"type", "title", "status", "code", "detail", "instance", "lease", "errors"}, k) {
					t.Fatalf("%s: the problem has %q: %s", step, k, r.Raw)
				}
			}
		}
	}
	check("a's acquire", c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000,"metadata":{"x":1}}`), 200)
	b := startAcquire(t, c, name, `{"holder":"b","ttlMs":60000,"waitMs":30000}`)
	check("c's acquire", c.Post(t, p+":acquire", `{"holder":"c","ttlMs":60000}`), 409)
	waitsFor(t, m).await(t, name, "b")
	check("get while b waits", c.Get(t, p), 200)
	check("a's renew", c.Post(t, p+":renew", `{"holder":"a","fencingToken":1,"ttlMs":30000}`), 200)
	check("a's repeat acquire", c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), 200)
	check("a's release", c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), 200)
	got := b.answer(t, 5*time.Second)
	check("b's waiting acquire", got, 200)
	if got.Token() != 2 {
		t.Fatalf("b's waiting acquire got token %d, want 2", got.Token())
	}
	check("c's acquire after", c.Post(t, p+":acquire", `{"holder":"c","ttlMs":60000}`), 409)
	check("b's release", c.Post(t, p+":release", `{"holder":"b","fencingToken":2}`), 200)
	check("c's acquire once free", c.Post(t, p+":acquire", `{"holder":"c","ttlMs":60000}`), 200)
	check("list", e2e.Response{Status: 200, Body: c.Get(t, "/v1/leases?prefix="+name).Body["leases"].([]any)[0].(map[string]any)}, 200)
	for range 5 { // acquired 1, released 1, acquired 2, released 2, acquired 3
		ev := watch.Next(t)
		var data map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &data); err != nil {
			t.Fatalf("event %+v: %v", ev, err)
		}
		if _, ok := data["successor"]; ok {
			t.Fatalf("event %s has successor", ev.Data)
		}
		check("event "+ev.ID, e2e.Response{Status: 200, Body: data["lease"].(map[string]any)}, 200)
	}
}

// TestTransferNeedsAcquire: :transfer needs the acquire verb on the name,
// and only the principal that began the holding may hand it over; the
// reservation is for the successor as the transferring principal, or as
// the principal the transfer names (toPrincipal).
func TestTransferNeedsAcquire(t *testing.T) {
	srv, logs, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	bob := e2e.Client{URL: srv.URL, Token: bobTok}
	carol := e2e.Client{URL: srv.URL, Token: carolTok}
	p := "/v1/leases/team-a.handover"
	if r := alice.Post(t, p+":acquire", `{"holder":"w","ttlMs":30000}`); r.Status != 200 {
		t.Fatalf("alice's acquire = %d %s", r.Status, r.Raw)
	}
	before := stable(alice.Get(t, p))
	if r := carol.Post(t, p+":transfer", `{"holder":"w","fencingToken":1,"to":"w2"}`); r.Status != 403 || r.Code() != "permission_denied" {
		t.Fatalf("carol's (read only) transfer = %d %s, want 403", r.Status, r.Raw)
	}
	if r := alice.Post(t, "/v1/leases/team-b.handover:transfer", `{"holder":"w","fencingToken":1,"to":"w2"}`); r.Status != 403 || r.Code() != "permission_denied" {
		t.Fatalf("alice's transfer on team-b. = %d %s, want 403", r.Status, r.Raw)
	}
	if r := (e2e.Client{URL: srv.URL}).Post(t, p+":transfer", `{"holder":"w","fencingToken":1,"to":"w2"}`); r.Status != 401 || r.Code() != "unauthenticated" {
		t.Fatalf("transfer without credentials = %d %s, want 401", r.Status, r.Raw)
	}
	wrong := alice.Post(t, p+":transfer", `{"holder":"w","fencingToken":9,"to":"w2"}`)
	if r := bob.Post(t, p+":transfer", `{"holder":"w","fencingToken":1,"to":"w2"}`); r.Status != 409 || r.Raw != wrong.Raw {
		t.Fatalf("bob's transfer of alice's holding = %d %s, want exactly the wrong-token answer %s", r.Status, r.Raw, wrong.Raw)
	}
	if after := stable(alice.Get(t, p)); !mapsEqual(before, after) {
		t.Fatalf("refused transfers changed the lease: %v → %v", before, after)
	}
	if r := alice.Post(t, p+":transfer", `{"holder":"w","fencingToken":1,"to":"w2"}`); r.Status != 200 || r.Body["reservedFor"] != "w2" {
		t.Fatalf("alice's transfer = %d %s", r.Status, r.Raw)
	}
	if r := bob.Post(t, p+":acquire", `{"holder":"w2","ttlMs":30000}`); r.Status != 409 || r.Code() != "lease_reserved" {
		t.Fatalf("bob's acquire as the successor of alice's transfer = %d %s, want 409 lease_reserved (reserved for w2 as alice)", r.Status, r.Raw)
	}
	if r := alice.Post(t, p+":acquire", `{"holder":"w2","ttlMs":30000}`); r.Status != 200 || r.Token() != 2 || r.Lease()["principal"] != "alice@example.com" {
		t.Fatalf("alice's acquire as the successor = %d %s, want token 2 bound to alice", r.Status, r.Raw)
	}
	for _, bad := range []string{`"toPrincipal":""`, `"toPrincipal":"a b"`, `"toPrincipal":7`} {
		if r := alice.Post(t, p+":transfer", `{"holder":"w2","fencingToken":2,"to":"w3",`+bad+`}`); r.Status != 400 || !strings.Contains(r.Raw, `"field":"toPrincipal"`) {
			t.Fatalf("transfer with %s = %d %s, want 400 naming toPrincipal", bad, r.Status, r.Raw)
		}
	}
	if r := alice.Post(t, p+":transfer", `{"holder":"w2","fencingToken":2,"to":"w3","toPrincipal":"bob@example.com"}`); r.Status != 200 || r.Body["reservedFor"] != "w3" {
		t.Fatalf("alice's transfer to bob's w3 = %d %s", r.Status, r.Raw)
	}
	if r := alice.Post(t, p+":acquire", `{"holder":"w3","ttlMs":30000}`); r.Status != 409 || r.Code() != "lease_reserved" {
		t.Fatalf("alice's acquire as w3, reserved for bob = %d %s, want 409 lease_reserved", r.Status, r.Raw)
	}
	if r := bob.Post(t, p+":acquire", `{"holder":"w3","ttlMs":30000}`); r.Status != 200 || r.Token() != 3 || r.Lease()["principal"] != "bob@example.com" {
		t.Fatalf("bob's acquire as the named successor = %d %s, want token 3 bound to bob", r.Status, r.Raw)
	}
	if !strings.Contains(logs.String(), `"action":"transfer","outcome":"permission_denied","principal":"carol@example.com"`) {
		t.Errorf("no audit line for carol's refused transfer")
	}
}

// TestCrashTakeoverByTheBestCandidate is the worked example of
// docs/agents.md §12: agents of priority 10, 5 and 1; the 10 leads and
// checkpoints, then crashes (never releases); at its expireTime the 5, the
// best live candidate, gets the lease with the 10's last checkpoint while
// the 1 keeps waiting (on another instance, refused by the reservation).
// The 10 comes back preempting: the 5's renewals ask it to yield, and its
// transfer hands the lease and its own checkpoint to the 10.
func TestCrashTakeoverByTheBestCandidate(t *testing.T) {
	store := memory.New()
	c1, _ := succInstance(t, store)
	c2, _ := succInstance(t, store)
	name := "team-a.indexer"
	p := "/v1/leases/" + name
	if r := c1.Post(t, p+":acquire", `{"holder":"agent-10","ttlMs":1000,"priority":10}`); r.Status != 200 || r.Token() != 1 {
		t.Fatalf("agent-10's acquire = %d %s", r.Status, r.Raw)
	}
	one := startAcquire(t, c1, name, `{"holder":"agent-1","ttlMs":30000,"waitMs":10000,"priority":1}`)
	five := startAcquire(t, c2, name, `{"holder":"agent-5","ttlMs":30000,"waitMs":10000,"priority":5}`)
	waitCandidates(t, c1, name, 2)
	r := c1.Post(t, p+":renew", `{"holder":"agent-10","fencingToken":1,"checkpoint":{"batch":41}}`)
	if r.Status != 200 || checkpointOf(r) != `{"batch":41}` || r.Body["candidates"] != 2.0 || r.Body["yieldRequested"] != nil {
		t.Fatalf("agent-10's renew with its checkpoint = %d %s", r.Status, r.Raw)
	}
	// agent-10 crashes: no renew, no release. Its holding runs out at
	// expireTime; both waiters' timers fire then.
	got := five.answer(t, 5*time.Second)
	if got.Status != 200 || got.Holder() != "agent-5" || got.Token() != 2 || checkpointOf(got) != `{"batch":41}` ||
		got.Body["checkpointToken"] != 1.0 || got.Body["priority"] != 5.0 || got.Body["candidates"] != 1.0 {
		t.Fatalf("agent-5's waiting acquire = %d %s, want token 2 with agent-10's checkpoint {\"batch\":41}", got.Status, got.Raw)
	}
	if !one.pendingFor(200 * time.Millisecond) {
		t.Fatalf("agent-1's wait ended: %s", (<-one.done).Raw)
	}
	// agent-10 restarts and campaigns again, preempting.
	ten := startAcquire(t, c2, name, `{"holder":"agent-10","ttlMs":30000,"waitMs":10000,"priority":10,"preempt":true}`)
	waitCandidates(t, c1, name, 2)
	r = c2.Post(t, p+":renew", `{"holder":"agent-5","fencingToken":2,"checkpoint":{"batch":57}}`)
	if r.Status != 200 || r.Body["yieldRequested"] != true || r.Body["yieldTo"] != "agent-10" {
		t.Fatalf("agent-5's renew while agent-10 preempts = %d %s, want yieldRequested, yieldTo agent-10", r.Status, r.Raw)
	}
	if r := c2.Post(t, p+":transfer", `{"holder":"agent-5","fencingToken":2,"to":"agent-10","checkpoint":{"batch":58}}`); r.Status != 200 || r.Body["reservedFor"] != "agent-10" {
		t.Fatalf("agent-5's transfer = %d %s", r.Status, r.Raw)
	}
	got = ten.answer(t, 5*time.Second)
	if got.Status != 200 || got.Holder() != "agent-10" || got.Token() != 3 || checkpointOf(got) != `{"batch":58}` || got.Body["checkpointToken"] != 2.0 {
		t.Fatalf("agent-10's waiting acquire = %d %s, want token 3 with agent-5's checkpoint {\"batch\":58}", got.Status, got.Raw)
	}
	one.cancel()
	waitCandidates(t, c1, name, 0)
}

// TestCandidatesAreBounded: with MaxCandidates 2 (LEASESVC_MAX_CANDIDATES),
// a newcomer that ranks after both registered candidates waits
// unregistered; one that ranks before the last takes its place.
func TestCandidatesAreBounded(t *testing.T) {
	c, m := succInstanceWith(t, memory.New(), lease.Config{MaxCandidates: 2})
	name := "succ-bounded"
	p := "/v1/leases/" + name
	if r := c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`); r.Status != 200 {
		t.Fatalf("a's acquire = %d %s", r.Status, r.Raw)
	}
	var all []*pending
	for _, h := range []struct {
		holder string
		prio   int
	}{{"p5", 5}, {"p3", 3}} {
		all = append(all, startAcquire(t, c, name, `{"holder":"`+h.holder+`","ttlMs":30000,"waitMs":30000,"priority":`+strconv.Itoa(h.prio)+`}`))
	}
	waitCandidates(t, c, name, 2)
	all = append(all, startAcquire(t, c, name, `{"holder":"p1","ttlMs":30000,"waitMs":30000,"priority":1,"preempt":true}`))
	waitsFor(t, m).await(t, name, "p1") // p1's first attempt was refused
	if r := c.Post(t, p+":renew", `{"holder":"a","fencingToken":1}`); r.Body["candidates"] != 2.0 || r.Body["yieldTo"] != nil {
		t.Fatalf("renew with a full list and p1 waiting = %s, want 2 candidates and no yield to the unregistered p1", r.Raw)
	}
	all = append(all, startAcquire(t, c, name, `{"holder":"p9","ttlMs":30000,"waitMs":30000,"priority":9,"preempt":true}`))
	waitsFor(t, m).await(t, name, "p9") // registered on its first attempt
	if r := c.Post(t, p+":renew", `{"holder":"a","fencingToken":1}`); r.Body["yieldTo"] != "p9" || r.Body["candidates"] != 2.0 {
		t.Fatalf("renew once p9 registered = %s, want a yield to p9 and 2 candidates", r.Raw)
	}
	if r := c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`); r.Body["reservedFor"] != "p9" || r.Body["held"] != false {
		t.Fatalf("a's release = %s, want the lease reserved for p9", r.Raw)
	}
	if got := all[3].answer(t, 5*time.Second); got.Status != 200 || got.Holder() != "p9" {
		t.Fatalf("p9's acquire = %d %s, want the lease", got.Status, got.Raw)
	}
	for _, w := range all[:3] {
		w.cancel()
	}
	waitCandidates(t, c, name, 0)
}

// TestCandidateBoundToPrincipal: another principal's waiting acquire under
// a candidate's holder name neither replaces its registration (priority,
// preempt, and so the yield request) nor takes the lease reserved for it.
func TestCandidateBoundToPrincipal(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	bob := e2e.Client{URL: srv.URL, Token: bobTok}
	ops := e2e.Client{URL: srv.URL, Token: opsTok}
	name := "team-a.yield"
	if r := ops.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"leader","ttlMs":30000}`); r.Status != 200 {
		t.Fatalf("ops' acquire = %d %s", r.Status, r.Raw)
	}
	cand := startAcquire(t, alice, name, `{"holder":"cand","ttlMs":30000,"waitMs":30000,"priority":500,"preempt":true}`)
	waitCandidates(t, alice, name, 1)
	if r := ops.Post(t, "/v1/leases/"+name+":renew", `{"holder":"leader","fencingToken":1}`); r.Body["yieldTo"] != "cand" {
		t.Fatalf("renew before bob's acquire = %s, want yieldTo cand", r.Raw)
	}
	if r := bob.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"cand","ttlMs":30000,"waitMs":1,"priority":0}`); r.Status != 409 || r.Code() != "lease_held" {
		t.Fatalf("bob's waiting acquire as cand = %d %s, want 409 lease_held", r.Status, r.Raw)
	}
	if r := ops.Post(t, "/v1/leases/"+name+":renew", `{"holder":"leader","fencingToken":1}`); r.Body["yieldRequested"] != true || r.Body["yieldTo"] != "cand" {
		t.Fatalf("renew after bob's acquire as cand = %s, want alice's yield request to stand", r.Raw)
	}
	if r := ops.Post(t, "/v1/leases/"+name+":release", `{"holder":"leader","fencingToken":1}`); r.Status != 200 {
		t.Fatalf("release = %d %s", r.Status, r.Raw)
	}
	got := cand.answer(t, 10*time.Second)
	if got.Status != 200 || got.Lease()["principal"] != "alice@example.com" || got.Token() != 2 {
		t.Fatalf("alice's candidate after the release = %d %s, want the lease, token 2, bound to alice", got.Status, got.Raw)
	}
}
