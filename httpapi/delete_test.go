package httpapi_test

import (
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

// deleteService serves the API with "team-a.own" as the service's own
// lease (httpapi.Config.Internal).
func deleteService(t *testing.T) e2e.Client {
	t.Helper()
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events, Heartbeat: time.Hour, Internal: []string{"team-a.own"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.CloseStreams(); srv.Close() })
	return e2e.Client{URL: srv.URL}
}

// TestDeleteLease: DELETE removes a free lease (200 with the lease as it
// was), refuses a held one (409 lease_held with the lease) and a body
// (400), and answers 404 for a lease that never existed or is already
// deleted; get and list do not find it, and the next acquire gets the
// next token (docs/contract.md §15).
func TestDeleteLease(t *testing.T) {
	c := deleteService(t)
	if r := c.Do(t, http.MethodDelete, "/v1/leases/team-a.x", "", ""); r.Status != 404 || r.Code() != "not_found" {
		t.Fatalf("DELETE of a lease that never existed = %d %s, want 404 not_found", r.Status, r.Raw)
	}
	post(t, c, "/v1/leases/team-a.x:acquire", `{"holder":"a","ttlMs":60000}`)
	r := c.Do(t, http.MethodDelete, "/v1/leases/team-a.x", "", "")
	if r.Status != 409 || r.Code() != "lease_held" || r.Holder() != "a" {
		t.Fatalf("DELETE of a held lease = %d %s, want 409 lease_held with the lease", r.Status, r.Raw)
	}
	post(t, c, "/v1/leases/team-a.x:release", `{"holder":"a","fencingToken":1}`)
	if r := c.Do(t, http.MethodDelete, "/v1/leases/team-a.x", "application/json", `{}`); r.Status != 400 || r.Code() != "invalid_argument" {
		t.Fatalf("DELETE with a body = %d %s, want 400", r.Status, r.Raw)
	}
	if r := c.Do(t, http.MethodDelete, "/v1/leases/team-a.x?force=true", "", ""); r.Status != 400 {
		t.Fatalf("DELETE with a query parameter = %d %s, want 400", r.Status, r.Raw)
	}
	r = c.Do(t, http.MethodDelete, "/v1/leases/team-a.x", "", "")
	if r.Status != 200 || r.Holder() != "a" || r.Token() != 1 || r.Lease()["held"] != false {
		t.Fatalf("DELETE of a released lease = %d %s, want 200 with the lease as it was", r.Status, r.Raw)
	}
	if r := c.Do(t, http.MethodDelete, "/v1/leases/team-a.x", "", ""); r.Status != 404 {
		t.Fatalf("repeated DELETE = %d %s, want 404", r.Status, r.Raw)
	}
	if r := c.Get(t, "/v1/leases/team-a.x"); r.Status != 404 || r.Code() != "not_found" {
		t.Fatalf("GET after DELETE = %d %s, want 404 not_found", r.Status, r.Raw)
	}
	if r := c.Get(t, "/v1/leases?prefix=team-a."); r.Status != 200 || strings.Contains(r.Raw, "team-a.x") {
		t.Fatalf("list after DELETE = %d %s, want no team-a.x", r.Status, r.Raw)
	}
	if r := post(t, c, "/v1/leases/team-a.x:acquire", `{"holder":"b","ttlMs":60000}`); r.Token() != 2 {
		t.Fatalf("acquire after DELETE = %s, want fencing token 2", r.Raw)
	}
	if r := c.Do(t, http.MethodPut, "/v1/leases/team-a.x", "", ""); r.Status != 405 || !strings.Contains(r.Header.Get("Allow"), "DELETE") {
		t.Fatalf("PUT on a lease = %d, Allow %q; want 405 naming DELETE", r.Status, r.Header.Get("Allow"))
	}
}

// TestDeletedOnStreams: both watch streams send a deleted event, and a
// later acquire of the name continues on them with the next token.
func TestDeletedOnStreams(t *testing.T) {
	c := deleteService(t)
	post(t, c, "/v1/leases/team-a.x:acquire", `{"holder":"a","ttlMs":60000}`)
	prefix := e2e.WatchPrefix(t, c, "team-a.", "")
	one := e2e.WatchWith(t, c, "team-a.x")
	if got := ids(nextEvents(t, prefix, 1)); !slices.Equal(got, []string{"team-a.x/1/snapshot"}) {
		t.Fatalf("prefix snapshot %v", got)
	}
	if ev := one.Next(t); ev.Event != "lease" {
		t.Fatalf("lease stream starts with %q, want lease", ev.Event)
	}
	post(t, c, "/v1/leases/team-a.x:release", `{"holder":"a","fencingToken":1}`)
	if r := c.Do(t, http.MethodDelete, "/v1/leases/team-a.x", "", ""); r.Status != 200 {
		t.Fatalf("DELETE = %d %s", r.Status, r.Raw)
	}
	post(t, c, "/v1/leases/team-a.x:acquire", `{"holder":"b","ttlMs":60000}`)
	want := []string{"team-a.x/1/released", "team-a.x/1/deleted", "team-a.x/2/acquired"}
	if got := ids(nextEvents(t, prefix, 3)); !slices.Equal(got, want) {
		t.Fatalf("prefix stream %v, want %v", got, want)
	}
	var got []string
	for range 3 {
		got = append(got, parseSSE(t, one.Next(t)).String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lease stream %v, want %v", got, want)
	}
}

// TestInternalLeasesNotListed: the service's own leases are left out of
// list and the prefix stream, and get still shows them.
func TestInternalLeasesNotListed(t *testing.T) {
	c := deleteService(t)
	post(t, c, "/v1/leases/team-a.own:acquire", `{"holder":"svc","ttlMs":60000}`)
	post(t, c, "/v1/leases/team-a.x:acquire", `{"holder":"a","ttlMs":60000}`)
	if r := c.Get(t, "/v1/leases?prefix=team-a."); r.Status != 200 || strings.Contains(r.Raw, "team-a.own") || !strings.Contains(r.Raw, "team-a.x") {
		t.Fatalf("list = %d %s, want team-a.x without team-a.own", r.Status, r.Raw)
	}
	if r := c.Get(t, "/v1/leases/team-a.own"); r.Status != 200 || r.Holder() != "svc" {
		t.Fatalf("get of the service's own lease = %d %s, want it", r.Status, r.Raw)
	}
	s := e2e.WatchPrefix(t, c, "team-a.", "")
	post(t, c, "/v1/leases/team-a.own:release", `{"holder":"svc","fencingToken":1}`)
	post(t, c, "/v1/leases/team-a.x:release", `{"holder":"a","fencingToken":1}`)
	if got := ids(nextEvents(t, s, 2)); !slices.Equal(got, []string{"team-a.x/1/snapshot", "team-a.x/1/released"}) {
		t.Fatalf("prefix stream %v, want team-a.x only", got)
	}
}

// TestDeleteNeedsTheDeleteVerb: with a policy, DELETE needs delete (or
// admin) on the name: acquire and read are refused with 403 and an audit
// line, and the deletion writes one naming the operator.
func TestDeleteNeedsTheDeleteVerb(t *testing.T) {
	srv, logs, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	post(t, alice, "/v1/leases/team-a.del:acquire", `{"holder":"a","ttlMs":60000}`)
	post(t, alice, "/v1/leases/team-a.del:release", `{"holder":"a","fencingToken":1}`)
	for _, tok := range []string{aliceTok, carolTok} {
		if r := (e2e.Client{URL: srv.URL, Token: tok}).Do(t, http.MethodDelete, "/v1/leases/team-a.del", "", ""); r.Status != 403 || r.Code() != "permission_denied" {
			t.Fatalf("DELETE without the delete verb = %d %s, want 403", r.Status, r.Raw)
		}
	}
	if !strings.Contains(logs.String(), `"action":"delete","outcome":"permission_denied"`) {
		t.Fatalf("no audit line for the refused delete:\n%s", logs.String())
	}
	if r := (e2e.Client{URL: srv.URL, Token: opsTok}).Do(t, http.MethodDelete, "/v1/leases/team-a.del", "", ""); r.Status != 200 {
		t.Fatalf("DELETE by admin = %d %s, want 200 (admin implies delete)", r.Status, r.Raw)
	}
}
