package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// Tokens of the test principals.
const (
	aliceTok = "alice-token-0123456789" // acquire on team-a.
	bobTok   = "bob-token-0123456789ab" // acquire on team-a.
	carolTok = "carol-token-0123456789" // read on team-a.
	opsTok   = "ops-token-0123456789ab" // admin everywhere
	flowTok  = "flow-token-0123456789a" // acquire everywhere
)

const testTokens = `tokens:
  - {principal: alice@example.com, token: ` + aliceTok + `}
  - {principal: bob@example.com, token: ` + bobTok + `}
  - {principal: carol@example.com, token: ` + carolTok + `}
  - {principal: oncall@ops.example.com, token: ` + opsTok + `}
  - {principal: flows@example.com, token: ` + flowTok + `}
`

const testPolicy = `grants:
  - principals: [alice@example.com, bob@example.com]
    verbs: [acquire]
    prefixes: [team-a.]
  - principals: [carol@example.com]
    verbs: [read]
    prefixes: [team-a.]
  - principals: ["*@ops.example.com"]
    verbs: [admin]
    prefixes: ["*"]
  - principals: [flows@example.com]
    verbs: [acquire]
    prefixes: ["*"]
`

// authServer serves the API with static tokens, the test policy and the
// given limiter; its log (audit lines included) goes to the returned buffer.
func authServer(t *testing.T, limiter *auth.Limiter) (*httptest.Server, *e2e.SyncBuffer, *lease.Manager) {
	t.Helper()
	return authServerWith(t, httpapi.Config{Limiter: limiter})
}

// authServerWith is authServer with cfg's other fields (Limits, …).
func authServerWith(t *testing.T, cfg httpapi.Config) (*httptest.Server, *e2e.SyncBuffer, *lease.Manager) {
	t.Helper()
	authn, err := auth.ParseStatic([]byte(testTokens), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := auth.ParsePolicy([]byte(testPolicy), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	logs := &e2e.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger, cfg.Authenticator, cfg.Policy, cfg.Audit, cfg.Events = log, authn, policy, audit.New(log), events
	h, err := httpapi.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, logs, m
}

// leaseRequests is one request on every lease route, for name, as holder
// "h" with token 1 where a route needs them.
func leaseRequests(name string) []struct{ method, path, body string } {
	p := "/v1/leases/" + name
	return []struct{ method, path, body string }{
		{"POST", p + ":acquire", `{"holder":"h","ttlMs":30000}`},
		{"POST", p + ":renew", `{"holder":"h","fencingToken":1,"ttlMs":60000}`},
		{"POST", p + ":release", `{"holder":"h","fencingToken":1}`},
		{"POST", p + ":revoke", `{"reason":"test"}`},
		{"POST", p + ":transfer", `{"holder":"h","fencingToken":1,"to":"k"}`},
		{"GET", p, ""},
		{"GET", p + ":watch", ""},
		{"GET", "/v1/leases?prefix=" + name, ""},
	}
}

// TestAuthRefusesEveryRoute checks that requests without valid credentials,
// and requests the policy does not allow, are refused on every lease route
// with the right code, reveal nothing of the lease, write an audit line and
// change nothing.
func TestAuthRefusesEveryRoute(t *testing.T) {
	srv, logs, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	name := "team-a.sched"
	held := alice.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"h","ttlMs":30000}`)
	if held.Status != 200 || held.Lease()["principal"] != "alice@example.com" {
		t.Fatalf("alice's acquire = %d %s, want 200 with principal alice@example.com", held.Status, held.Raw)
	}
	before := alice.Get(t, "/v1/leases/"+name)

	for _, cred := range []struct {
		label, header string
	}{
		{"no credentials", ""},
		{"unknown token", "Bearer not-a-known-token-000000"},
		{"basic scheme", "Basic " + aliceTok},
		{"empty bearer", "Bearer "},
	} {
		for _, rq := range leaseRequests(name) {
			req, _ := http.NewRequestWithContext(t.Context(), rq.method, srv.URL+rq.path, strings.NewReader(rq.body))
			if cred.header != "" {
				req.Header.Set("Authorization", cred.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 401 || !strings.Contains(string(raw), `"code":"unauthenticated"`) ||
				resp.Header.Get("Content-Type") != "application/problem+json" || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: %s %s = %d %s %q, want 401 unauthenticated problem with WWW-Authenticate", cred.label, rq.method, rq.path, resp.StatusCode, raw, resp.Header)
			}
			if strings.Contains(string(raw), "alice") || strings.Contains(string(raw), `"holder"`) || strings.Contains(string(raw), "fencingToken") {
				t.Errorf("%s: %s %s reveals the lease: %s", cred.label, rq.method, rq.path, raw)
			}
		}
	}

	carol := e2e.Client{URL: srv.URL, Token: carolTok} // read on team-a. only
	bob := e2e.Client{URL: srv.URL, Token: bobTok}     // acquire on team-a., no admin
	for _, c := range []struct {
		who    string
		client e2e.Client
		name   string
		ok     map[string]bool // routes this caller may use (by custom method, "get", "list")
	}{
		{"carol on team-a.", carol, name, map[string]bool{"get": true, "watch": true, "list": true}},
		{"bob on team-a.", bob, name, map[string]bool{"acquire": true, "renew": true, "release": true, "transfer": true, "get": true, "watch": true, "list": true}},
		{"alice on team-b.", alice, "team-b.sched", nil},
	} {
		for _, rq := range leaseRequests(c.name) {
			route := "get"
			if i := strings.LastIndexByte(rq.path, ':'); i > 0 {
				route = rq.path[i+1:]
			}
			if strings.HasPrefix(rq.path, "/v1/leases?") {
				route = "list"
			}
			if c.ok[route] {
				continue
			}
			r := c.client.Do(t, rq.method, rq.path, "application/json", rq.body)
			if r.Status != 403 || r.Code() != "permission_denied" || strings.Contains(r.Raw, "fencingToken") {
				t.Errorf("%s: %s %s = %d %s, want 403 permission_denied revealing nothing", c.who, rq.method, rq.path, r.Status, r.Raw)
			}
		}
	}
	after := alice.Get(t, "/v1/leases/"+name)
	for _, k := range []string{"holder", "fencingToken", "expireTime", "renewTime", "transitions", "principal"} {
		if before.Body[k] != after.Body[k] {
			t.Fatalf("refused requests changed %s: %v → %v", k, before.Body[k], after.Body[k])
		}
	}
	log := logs.String()
	for _, want := range []string{
		`"outcome":"unauthenticated","principal":"","lease":"team-a.sched"`,
		`"action":"revoke","outcome":"permission_denied","principal":"bob@example.com","lease":"team-a.sched"`,
		`"action":"acquire","outcome":"permission_denied","principal":"carol@example.com"`,
		`"leasesvc_log":"audit"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
	if strings.Contains(log, aliceTok) || strings.Contains(log, "not-a-known-token") {
		t.Error("the log contains a bearer token")
	}
}

// TestHolderBinding checks that another principal that knows the holder
// name and token (both public) cannot renew or release the holding, or
// acquire it as the same holder, and learns nothing a wrong token would not
// tell: the answers are byte-for-byte those of a wrong token.
func TestHolderBinding(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	bob := e2e.Client{URL: srv.URL, Token: bobTok}
	p := "/v1/leases/team-a.bind"
	if r := alice.Post(t, p+":acquire", `{"holder":"worker","ttlMs":30000}`); r.Status != 200 || r.Token() != 1 {
		t.Fatalf("alice acquire = %d %s", r.Status, r.Raw)
	}
	before := alice.Get(t, p)
	wrongToken := alice.Post(t, p+":renew", `{"holder":"worker","fencingToken":9}`)
	if wrongToken.Status != 409 || wrongToken.Code() != "lease_lost" {
		t.Fatalf("alice renew with a wrong token = %d %s", wrongToken.Status, wrongToken.Raw)
	}
	bobRenew := bob.Post(t, p+":renew", `{"holder":"worker","fencingToken":1}`)
	if bobRenew.Status != 409 || bobRenew.Raw != wrongToken.Raw {
		t.Errorf("bob's renew of alice's holding = %d %s, want exactly the wrong-token answer %s", bobRenew.Status, bobRenew.Raw, wrongToken.Raw)
	}
	wrongRelease := alice.Post(t, p+":release", `{"holder":"worker","fencingToken":9}`)
	if r := bob.Post(t, p+":release", `{"holder":"worker","fencingToken":1}`); r.Status != 409 || r.Raw != wrongRelease.Raw {
		t.Errorf("bob's release of alice's holding = %d %s, want exactly the wrong-token answer %s", r.Status, r.Raw, wrongRelease.Raw)
	}
	if r := bob.Post(t, p+":acquire", `{"holder":"worker","ttlMs":30000}`); r.Status != 409 || r.Code() != "lease_held" {
		t.Errorf("bob's acquire as alice's holder name = %d %s, want 409 lease_held", r.Status, r.Raw)
	}
	after := alice.Get(t, p)
	for _, k := range []string{"holder", "fencingToken", "expireTime", "renewTime", "ttlMs", "principal"} {
		if before.Body[k] != after.Body[k] {
			t.Fatalf("bob's requests changed %s: %v → %v", k, before.Body[k], after.Body[k])
		}
	}
	if r := alice.Post(t, p+":release", `{"holder":"worker","fencingToken":1}`); r.Status != 200 {
		t.Fatalf("alice's own release = %d %s", r.Status, r.Raw)
	}
	if r := bob.Post(t, p+":acquire", `{"holder":"worker","ttlMs":30000}`); r.Status != 200 || r.Token() != 2 || r.Lease()["principal"] != "bob@example.com" {
		t.Fatalf("bob's acquire after the release = %d %s, want token 2 bound to bob", r.Status, r.Raw)
	}
}

// TestRevokeOverHTTP checks :revoke: admin only, a reason required, the
// holding ended with operator and reason shown, the holder's renew lost,
// the next acquire token + 1, and a revoked event on the watch stream.
func TestRevokeOverHTTP(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	ops := e2e.Client{URL: srv.URL, Token: opsTok}
	p := "/v1/leases/team-a.rev"
	if r := ops.Post(t, p+":revoke", `{"reason":"x"}`); r.Status != 404 || r.Code() != "not_found" {
		t.Fatalf("revoke of a lease that never existed = %d %s, want 404", r.Status, r.Raw)
	}
	alice.Post(t, p+":acquire", `{"holder":"worker","ttlMs":30000}`)
	watch := e2e.WatchWith(t, alice, "team-a.rev")
	if ev := watch.Next(t); ev.Event != "lease" {
		t.Fatalf("first watch event %q, want lease", ev.Event)
	}
	for _, bad := range []struct{ body, field string }{
		{`{}`, "reason"},
		{`{"reason":""}`, "reason"},
		{`{"reason":"` + strings.Repeat("r", 513) + `"}`, "reason"},
		{`{"reason":"a\u0007b"}`, "reason"},
		{`{"reason":"x","fencingToken":0}`, "fencingToken"},
		{`{"reason":"x","extra":1}`, "extra"},
	} {
		r := ops.Post(t, p+":revoke", bad.body)
		if r.Status != 400 || r.Code() != "invalid_argument" || !strings.Contains(r.Raw, `"field":"`+bad.field+`"`) {
			t.Errorf("revoke %s = %d %s, want 400 naming %s", bad.body, r.Status, r.Raw, bad.field)
		}
	}
	if r := ops.Post(t, p+":revoke", `{"reason":"wrong holding","fencingToken":2}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("revoke naming another holding = %d %s, want 409 lease_lost", r.Status, r.Raw)
	}
	if r := alice.Get(t, p); r.Body["held"] != true {
		t.Fatalf("refused revokes ended the holding: %s", r.Raw)
	}
	r := ops.Post(t, p+":revoke", `{"reason":"leader stuck in a loop","fencingToken":1}`)
	if r.Status != 200 || r.Body["held"] != false || r.Body["revokedBy"] != "oncall@ops.example.com" ||
		r.Body["revokeReason"] != "leader stuck in a loop" || r.Body["expireTime"] != r.Body["serverTime"] || r.Token() != 1 {
		t.Fatalf("revoke = %d %s, want not held, expireTime = serverTime, revokedBy and revokeReason set", r.Status, r.Raw)
	}
	ev := watch.Next(t)
	var data struct {
		Type, Reason, Operator string
		Lease                  map[string]any
	}
	if err := json.Unmarshal([]byte(ev.Data), &data); err != nil || ev.Event != "revoked" || ev.ID != "team-a.rev/1/revoked" ||
		data.Reason != "leader stuck in a loop" || data.Operator != "oncall@ops.example.com" || data.Lease["held"] != false {
		t.Fatalf("watch event after revoke = %+v (%v), want revoked with reason and operator", ev, err)
	}
	if r := alice.Post(t, p+":renew", `{"holder":"worker","fencingToken":1}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("holder's renew after revoke = %d %s, want lease_lost", r.Status, r.Raw)
	}
	if r := alice.Post(t, p+":release", `{"holder":"worker","fencingToken":1}`); r.Status != 409 || r.Code() != "lease_lost" {
		t.Fatalf("holder's release after revoke = %d %s, want lease_lost", r.Status, r.Raw)
	}
	if r := ops.Post(t, p+":revoke", `{"reason":"again"}`); r.Status != 200 || r.Body["revokeReason"] != "leader stuck in a loop" {
		t.Fatalf("revoke of a lease not held = %d %s, want 200 unchanged", r.Status, r.Raw)
	}
	if r := alice.Post(t, p+":acquire", `{"holder":"worker","ttlMs":30000}`); r.Status != 200 || r.Token() != 2 || r.Body["revokeReason"] != nil {
		t.Fatalf("acquire after revoke = %d %s, want token 2 without revocation", r.Status, r.Raw)
	}
}

// TestListFilteredByPolicy checks that list shows only what the caller may
// read, and refuses a prefix under which it may read nothing.
func TestListFilteredByPolicy(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	flows := e2e.Client{URL: srv.URL, Token: flowTok}
	for _, n := range []string{"team-a.one", "team-a.two", "team-b.one", "zzz"} {
		if r := flows.Post(t, "/v1/leases/"+n+":acquire", `{"holder":"h","ttlMs":30000}`); r.Status != 200 {
			t.Fatalf("acquire %s = %d %s", n, r.Status, r.Raw)
		}
	}
	carol := e2e.Client{URL: srv.URL, Token: carolTok}
	names := func(r e2e.Response) []string {
		var out []string
		for _, l := range r.Body["leases"].([]any) {
			out = append(out, l.(map[string]any)["name"].(string))
		}
		return out
	}
	if r := carol.Get(t, "/v1/leases"); r.Status != 200 || strings.Join(names(r), ",") != "team-a.one,team-a.two" {
		t.Fatalf("carol's list of everything = %d %s, want only team-a.*", r.Status, r.Raw)
	}
	if r := carol.Get(t, "/v1/leases?prefix=team-a.t"); r.Status != 200 || strings.Join(names(r), ",") != "team-a.two" {
		t.Fatalf("carol's list of team-a.t = %d %s", r.Status, r.Raw)
	}
	if r := carol.Get(t, "/v1/leases?prefix=team-b."); r.Status != 403 || r.Code() != "permission_denied" {
		t.Fatalf("carol's list of team-b. = %d %s, want 403", r.Status, r.Raw)
	}
	// Paging through a filtered list finds every readable lease once.
	var seen []string
	tok := ""
	for range 10 {
		r := carol.Get(t, "/v1/leases?pageSize=1&pageToken="+tok)
		if r.Status != 200 {
			t.Fatalf("page = %d %s", r.Status, r.Raw)
		}
		seen = append(seen, names(r)...)
		if tok, _ = r.Body["nextPageToken"].(string); tok == "" {
			break
		}
	}
	if strings.Join(seen, ",") != "team-a.one,team-a.two" {
		t.Fatalf("paged filtered list = %v, want team-a.one,team-a.two", seen)
	}
}

// TestPagingHidesWhatItSkips: paging with pageSize=1 through a list with
// leases the caller may not read gives one page per readable lease (no
// empty page per hidden one), and every token has the same length whatever
// the name it continues after; only when the scan budget runs out does a
// page come back empty, with a token.
func TestPagingHidesWhatItSkips(t *testing.T) {
	srv, _, _ := authServerWith(t, httpapi.Config{Limits: httpapi.Limits{ListScanBudget: 3}})
	flows := e2e.Client{URL: srv.URL, Token: flowTok}
	hidden := []string{"b", "bb" + strings.Repeat("x", 100), "c1", "c2", "c3", "c4", "team-b." + strings.Repeat("y", 120), "u"}
	for _, n := range append([]string{"team-a.1", "team-a.2" + strings.Repeat("z", 120), "team-a.3"}, hidden...) {
		if r := flows.Post(t, "/v1/leases/"+n+":acquire", `{"holder":"h","ttlMs":30000}`); r.Status != 200 {
			t.Fatalf("acquire %s = %d %s", n, r.Status, r.Raw)
		}
	}
	page := func(c e2e.Client, tok string) (names []string, next string) {
		r := c.Get(t, "/v1/leases?pageSize=1&pageToken="+tok)
		if r.Status != 200 {
			t.Fatalf("page = %d %s", r.Status, r.Raw)
		}
		for _, l := range r.Body["leases"].([]any) {
			names = append(names, l.(map[string]any)["name"].(string))
		}
		next, _ = r.Body["nextPageToken"].(string)
		return names, next
	}
	lengths := map[int]bool{}
	for _, c := range []e2e.Client{flows, {URL: srv.URL, Token: carolTok}} {
		for tok := ""; ; {
			_, next := page(c, tok)
			if next == "" {
				break
			}
			lengths[len(next)] = true
			tok = next
		}
	}
	if len(lengths) != 1 {
		t.Errorf("page tokens have %d lengths %v, want one: the length must not follow the name", len(lengths), lengths)
	}
	// carol reads team-a. only; names sort b…, c…, team-a.…, team-b.…, u.
	carol := e2e.Client{URL: srv.URL, Token: carolTok}
	var pages [][]string
	for tok := ""; ; {
		names, next := page(carol, tok)
		pages = append(pages, names)
		if tok = next; tok == "" {
			break
		}
	}
	// A budget of 3: the first 3 of the 6 hidden names before team-a. take
	// an empty page; the page of team-a.3 looks past the 2 hidden names
	// after it and ends the list.
	if got := fmt.Sprint(pages); got != "[[] [team-a.1] [team-a.2"+strings.Repeat("z", 120)+"] [team-a.3]]" {
		t.Fatalf("carol's pages = %s, want one empty page (budget 3 spent), then one per team-a. lease, the last without a token", got)
	}
}

// TestRateLimit checks that a burst over a principal's limit is answered
// 429 resource_exhausted with Retry-After, that other principals are not
// affected, and that the caller recovers once its bucket refills.
func TestRateLimit(t *testing.T) {
	// One token every 2 s: the 8 requests before the pause have 2 s before a
	// token comes back, ample even on a loaded machine with the race detector.
	srv, _, _ := authServer(t, auth.NewLimiter(0.5, 3))
	alice := e2e.Client{URL: srv.URL, Token: aliceTok}
	bob := e2e.Client{URL: srv.URL, Token: bobTok}
	var codes []int
	for range 6 {
		codes = append(codes, alice.Get(t, "/v1/leases/team-a.rl").Status)
	}
	if got := strconvs(codes); got != "404,404,404,429,429,429" {
		t.Fatalf("alice's burst of 6 answered %s, want 3 served (404: no such lease) then 429", got)
	}
	r := alice.Get(t, "/v1/leases/team-a.rl")
	if r.Code() != "resource_exhausted" || r.Header.Get("Retry-After") != "2" {
		t.Fatalf("over the limit = %d %s Retry-After %q, want resource_exhausted, Retry-After 2", r.Status, r.Raw, r.Header.Get("Retry-After"))
	}
	if r := bob.Get(t, "/v1/leases/team-a.rl"); r.Status != 404 {
		t.Fatalf("bob while alice is limited = %d %s, want served", r.Status, r.Raw)
	}
	time.Sleep(2100 * time.Millisecond) // a token every 2 s
	if r := alice.Get(t, "/v1/leases/team-a.rl"); r.Status != 404 {
		t.Fatalf("alice after a second = %d %s, want served again", r.Status, r.Raw)
	}
}

func strconvs(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ",")
}

// TestFlowsWithAuth runs the whole contract flow of the lease core issue as
// an allowed principal: with authentication on, docs/contract.md §3 is unchanged.
func TestFlowsWithAuth(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	e2e.FlowsWith(t, e2e.Client{URL: srv.URL, Token: flowTok})
}

// TestAuthenticatesBeforeValidating checks the order of the checks on every
// route: a caller without credentials gets 401 whatever else is wrong with
// its request (a bad name, query parameter or page token), and a caller the
// policy refuses gets 403 rather than the 400 its bad request would earn.
func TestAuthenticatesBeforeValidating(t *testing.T) {
	srv, _, _ := authServer(t, nil)
	bad := []struct{ method, path string }{
		{"GET", "/v1/leases?pageToken=not-a-token"},
		{"GET", "/v1/leases?pageSize=x"},
		{"GET", "/v1/leases?prefix=%2Fbad"},
		{"GET", "/v1/leases?bogus=1"},
		{"GET", "/v1/leases:watch?bogus=1"},
		{"GET", "/v1/leases:watch?history=maybe"},
		{"GET", "/v1/leases/-bad-name"},
		{"POST", "/v1/leases/-bad-name:acquire"},
	}
	for _, rq := range leaseRequests("team-b.x") {
		sep := "?"
		if strings.Contains(rq.path, "?") {
			sep = "&"
		}
		bad = append(bad, struct{ method, path string }{rq.method, rq.path + sep + "bogus=1"})
	}
	anon := e2e.Client{URL: srv.URL}
	for _, rq := range bad {
		if r := anon.Do(t, rq.method, rq.path, "application/json", `{}`); r.Status != 401 || r.Code() != "unauthenticated" {
			t.Errorf("unauthenticated %s %s = %d %s, want 401 unauthenticated", rq.method, rq.path, r.Status, r.Raw)
		}
	}
	carol := e2e.Client{URL: srv.URL, Token: carolTok} // read on team-a. only
	for _, rq := range []struct{ method, path string }{
		{"GET", "/v1/leases?prefix=team-b.&pageToken=not-a-token"},
		{"GET", "/v1/leases?prefix=team-b.&pageSize=x"},
		{"GET", "/v1/leases/team-b.x?bogus=1"},
		{"GET", "/v1/leases/team-b.x:watch?bogus=1"},
		{"POST", "/v1/leases/team-a.x:acquire?bogus=1"},
	} {
		if r := carol.Do(t, rq.method, rq.path, "application/json", `{}`); r.Status != 403 || r.Code() != "permission_denied" {
			t.Errorf("carol's %s %s = %d %s, want 403 permission_denied", rq.method, rq.path, r.Status, r.Raw)
		}
	}
	// Allowed, the same bad requests are 400.
	if r := carol.Get(t, "/v1/leases?prefix=team-a.&pageToken=not-a-token"); r.Status != 400 || !strings.Contains(r.Raw, `"field":"pageToken"`) {
		t.Errorf("carol's bad page token on her prefix = %d %s, want 400 naming pageToken", r.Status, r.Raw)
	}
}
