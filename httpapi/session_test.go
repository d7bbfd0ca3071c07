package httpapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/lease"
)

// TestSessionHeldOverREST: a holding held through a session (docs/contract.md
// §14) shows "session": true and its window; a REST renew, release or
// transfer of it, or a REST acquire by its holder, is 409 session_held
// (title "held through a session") and changes nothing; its death reaches
// a watch stream as a released event with reason session_expired; then a
// REST release of the ended holding by its holder succeeds.
func TestSessionHeldOverREST(t *testing.T) {
	c, m := succInstance(t, memory.New())
	ctx := t.Context()
	key := strings.Repeat("0f", 32)
	session := &lease.SessionRef{Key: key, Epoch: 1, Window: 1000 * time.Millisecond}
	hold := func(name string) lease.Lease {
		t.Helper()
		l, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "agent", TTL: 30 * time.Second, Session: session})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	name := "sess-rest"
	p := "/v1/leases/" + name
	l := hold(name)
	got := c.Get(t, p)
	if got.Status != 200 || got.Body["session"] != true || got.Body["sessionWindowMs"] != 1000.0 || strings.Contains(string(got.Raw), key) {
		t.Fatalf("GET of a session-held lease = %d %s; want session true, sessionWindowMs 1000, no session key", got.Status, got.Raw)
	}
	for _, tc := range []struct{ what, path, body string }{
		{"renew", p + ":renew", `{"holder":"agent","fencingToken":1}`},
		{"acquire by its holder", p + ":acquire", `{"holder":"agent","ttlMs":30000}`},
		{"release by its holder with its token", p + ":release", `{"holder":"agent","fencingToken":1}`},
		{"transfer by its holder with its token", p + ":transfer", `{"holder":"agent","fencingToken":1,"to":"next"}`},
	} {
		r := c.Post(t, tc.path, tc.body)
		if r.Status != 409 || r.Code() != "session_held" || r.Body["title"] != "held through a session" || r.Body["type"] != "urn:leasesvc:problem:session_held" {
			t.Fatalf("REST %s of a session-held lease = %d %s; want 409 session_held", tc.what, r.Status, r.Raw)
		}
	}
	if now := c.Get(t, p); now.Body["renewTime"] != got.Body["renewTime"] {
		t.Fatalf("refused REST writes changed the lease: %s", now.Raw)
	}
	if r := c.Post(t, p+":acquire", `{"holder":"other","ttlMs":30000}`); r.Status != 409 || r.Code() != "lease_held" || r.Lease()["session"] != true {
		t.Fatalf("another holder's acquire = %d %s; want 409 lease_held with the session-held lease", r.Status, r.Raw)
	}

	watch := e2e.Watch(t, c.URL, name)
	if ev := watch.Next(t); ev.Event != "lease" {
		t.Fatalf("first watch event %+v, want lease", ev)
	}
	if _, err := m.ExpireSession(ctx, lease.ReleaseRequest{Name: name, Holder: "agent", FencingToken: l.FencingToken, Session: session}); err != nil {
		t.Fatal(err)
	}
	ev := watch.Next(t)
	var data map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &data); err != nil || ev.Event != "released" || data["reason"] != "session_expired" {
		t.Fatalf("watch event on the session's death %+v; want released with reason session_expired", ev)
	}

	// Once its session died, a REST release of the ended holding by its
	// holder succeeds and changes nothing (§3 release of an ended holding).
	if r := c.Post(t, p+":release", `{"holder":"agent","fencingToken":1}`); r.Status != 200 || r.Body["held"] != false {
		t.Fatalf("REST release of the ended session-held holding = %d %s; want 200, not held", r.Status, r.Raw)
	}
}

// TestSessionRecordNamesReserved: a REST acquire of a name under
// leasesvc.session. is 400 invalid_argument on the name and creates
// nothing.
func TestSessionRecordNamesReserved(t *testing.T) {
	c, _ := succInstance(t, memory.New())
	name := lease.SessionRecordName(strings.Repeat("ab", 32))
	for _, n := range []string{name, "leasesvc.session.x", "leasesvc.session."} {
		r := c.Post(t, "/v1/leases/"+n+":acquire", `{"holder":"h","ttlMs":30000}`)
		errs, _ := r.Body["errors"].([]any)
		first, _ := func() (map[string]any, bool) {
			if len(errs) == 0 {
				return nil, false
			}
			f, ok := errs[0].(map[string]any)
			return f, ok
		}()
		if r.Status != 400 || r.Code() != "invalid_argument" || first["field"] != "name" {
			t.Fatalf("REST acquire of %q = %d %s; want 400 invalid_argument on name", n, r.Status, r.Raw)
		}
	}
	if r := c.Get(t, "/v1/leases/"+name); r.Status != 404 {
		t.Fatalf("GET after the refused acquire = %d %s; want 404", r.Status, r.Raw)
	}
}

// TestSessionRecordsNotListed: the sessions' own records (leasesvc.session.…)
// are left out of list and the prefix stream, whatever the prefix.
func TestSessionRecordsNotListed(t *testing.T) {
	c, m := succInstance(t, memory.New())
	key := strings.Repeat("ab", 32)
	record := lease.SessionRecordName(key)
	s := e2e.WatchPrefix(t, c, "", "")
	if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: record, Holder: "session", TTL: 30 * time.Second,
		Session: &lease.SessionRef{Key: key, Epoch: 1, Window: time.Second}, Metadata: []byte(`{"windowMs":1000}`)}); err != nil {
		t.Fatal(err)
	}
	post(t, c, "/v1/leases/leasesvc.x:acquire", `{"holder":"a","ttlMs":60000}`)
	for _, prefix := range []string{"", "leasesvc.", "leasesvc.session.", record} {
		r := c.Get(t, "/v1/leases?prefix="+prefix)
		if r.Status != 200 || strings.Contains(r.Raw, record) {
			t.Fatalf("list of prefix %q = %d %s; want no session record", prefix, r.Status, r.Raw)
		}
		if prefix != "" && prefix != "leasesvc." {
			continue
		}
		if !strings.Contains(r.Raw, "leasesvc.x") {
			t.Fatalf("list of prefix %q = %s; want leasesvc.x", prefix, r.Raw)
		}
	}
	if got := ids(nextEvents(t, s, 1)); !slices.Equal(got, []string{"leasesvc.x/1/acquired"}) {
		t.Fatalf("prefix stream %v, want leasesvc.x only", got)
	}
}
