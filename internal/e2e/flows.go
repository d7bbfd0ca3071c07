package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// UniqueName returns a lease name no other test uses.
func UniqueName(label string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "e2e" + hex.EncodeToString(b[:]) + "." + label
}

// expect fails the test unless r has the status (and, for errors, the
// problem code and media type).
func expect(t testing.TB, step string, r Response, status int, code string) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", step, r.Status, status, r.Raw)
	}
	if status >= 400 {
		if ct := r.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Fatalf("%s: Content-Type %q, want application/problem+json", step, ct)
		}
		if r.Code() != code {
			t.Fatalf("%s: code %q, want %q; body %s", step, r.Code(), code, r.Raw)
		}
	}
}

// Flows drives one service through the lease flows of the lease core issue:
// acquire, a refused contender, idempotent acquire, a lost renew, release,
// hand-over with token + 1, expiry and takeover with token + 1, and every
// malformed input of docs/contract.md §4, which must change nothing.
func Flows(t *testing.T, baseURL string) { FlowsWith(t, Client{URL: baseURL}) }

// FlowsWith runs Flows with c, which may carry credentials.
func FlowsWith(t *testing.T, c Client) {
	name := UniqueName("flow")
	path := "/v1/leases/" + name

	r := c.Post(t, path+":acquire", `{"holder":"agent-a","ttlMs":30000,"metadata":{"addr":"10.0.0.7:9000"}}`)
	expect(t, "acquire by a", r, http.StatusOK, "")
	if r.Token() != 1 || r.Holder() != "agent-a" || r.Body["held"] != true || r.Body["transitions"] != 1.0 {
		t.Fatalf("acquire by a = %s, want token 1, held by agent-a, transitions 1", r.Raw)
	}
	expireA := r.Body["expireTime"]

	r = c.Post(t, path+":acquire", `{"holder":"agent-b","ttlMs":30000}`)
	expect(t, "acquire by b while a holds", r, http.StatusConflict, "lease_held")
	if r.Holder() != "agent-a" || r.Token() != 1 || r.Lease()["expireTime"] != expireA {
		t.Fatalf("lease_held carries %s, want a's holding", r.Raw)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 30 {
		t.Fatalf("Retry-After %q, want 1–30 seconds", r.Header.Get("Retry-After"))
	}

	r = c.Post(t, path+":acquire", `{"holder":"agent-a","ttlMs":30000}`)
	expect(t, "acquire by a again", r, http.StatusOK, "")
	if r.Token() != 1 || r.Body["transitions"] != 1.0 {
		t.Fatalf("repeat acquire = %s, want the same holding (token 1)", r.Raw)
	}

	r = c.Post(t, path+":renew", `{"holder":"agent-a","fencingToken":2}`)
	expect(t, "renew with a wrong token", r, http.StatusConflict, "lease_lost")
	r = c.Post(t, path+":renew", `{"holder":"agent-a","fencingToken":1,"ttlMs":20000}`)
	expect(t, "renew", r, http.StatusOK, "")
	if r.Token() != 1 || r.Body["ttlMs"] != 20000.0 {
		t.Fatalf("renew = %s, want token 1 and ttl 20000", r.Raw)
	}

	r = c.Post(t, path+":release", `{"holder":"agent-a","fencingToken":1}`)
	expect(t, "release", r, http.StatusOK, "")
	if r.Body["held"] != false || r.Body["expireTime"] != r.Body["serverTime"] {
		t.Fatalf("release = %s, want not held, expireTime = serverTime", r.Raw)
	}

	r = c.Post(t, path+":acquire", `{"holder":"agent-b","ttlMs":1000}`)
	expect(t, "acquire by b after release", r, http.StatusOK, "")
	if r.Token() != 2 {
		t.Fatalf("acquire after release = %s, want token 2", r.Raw)
	}
	time.Sleep(1200 * time.Millisecond) // b's holding runs out

	r = c.Post(t, path+":acquire", `{"holder":"agent-c","ttlMs":60000}`)
	expect(t, "acquire by c after b expired", r, http.StatusOK, "")
	if r.Token() != 3 || r.Body["transitions"] != 3.0 {
		t.Fatalf("takeover after expiry = %s, want token 3, transitions 3", r.Raw)
	}
	r = c.Post(t, path+":renew", `{"holder":"agent-b","fencingToken":2}`)
	expect(t, "renew by the expired holder", r, http.StatusConflict, "lease_lost")

	before := c.Get(t, path)
	expect(t, "get", before, http.StatusOK, "")
	if before.Holder() != "agent-c" || before.Token() != 3 {
		t.Fatalf("get = %s, want agent-c with token 3", before.Raw)
	}
	list := c.Get(t, "/v1/leases?prefix="+name)
	expect(t, "list", list, http.StatusOK, "")
	if leases, _ := list.Body["leases"].([]any); len(leases) != 1 {
		t.Fatalf("list by prefix = %s, want the one lease", list.Raw)
	}

	MalformedWith(t, c, name, "agent-c")

	after := c.Get(t, path)
	for _, k := range []string{"holder", "fencingToken", "ttlMs", "acquireTime", "renewTime", "expireTime", "transitions"} {
		if fmt.Sprint(before.Body[k]) != fmt.Sprint(after.Body[k]) {
			t.Fatalf("malformed requests changed %s: %v → %v", k, before.Body[k], after.Body[k])
		}
	}
	if fmt.Sprint(after.Body["metadata"]) != "map[]" {
		t.Fatalf("metadata %v, want {}", after.Body["metadata"])
	}
}

// Malformed sends every kind of bad request of docs/contract.md §4 at the lease name,
// as its holder where that matters (so an accepted request would change
// the lease), and checks each answer's status and code.
func Malformed(t *testing.T, baseURL, name, holder string) {
	MalformedWith(t, Client{URL: baseURL}, name, holder)
}

// MalformedWith runs Malformed with c, which may carry credentials.
func MalformedWith(t *testing.T, c Client, name, holder string) {
	p := "/v1/leases/" + name
	h := strconv.Quote(holder)
	big := `{"holder":` + h + `,"ttlMs":30000,"metadata":{"x":"` + strings.Repeat("a", 70<<10) + `"}}`
	md17k := `{"holder":` + h + `,"ttlMs":30000,"metadata":{"x":"` + strings.Repeat("a", 17<<10) + `"}}`
	cases := []struct {
		name, method, path, ct, body string
		status                       int
		code, field                  string
	}{
		{"bad name", "POST", "/v1/leases/bad%20name:acquire", "application/json", `{"holder":"x","ttlMs":30000}`, 400, "invalid_argument", "name"},
		{"name too long", "POST", "/v1/leases/" + strings.Repeat("n", 129) + ":acquire", "application/json", `{"holder":"x","ttlMs":30000}`, 400, "invalid_argument", "name"},
		{"name with a slash", "GET", "/v1/leases/a%2Fb", "", "", 400, "invalid_argument", "name"},
		{"get bad name", "GET", "/v1/leases/-x", "", "", 400, "invalid_argument", "name"},
		{"missing holder", "POST", p + ":acquire", "application/json", `{"ttlMs":30000}`, 400, "invalid_argument", "holder"},
		{"empty holder", "POST", p + ":acquire", "application/json", `{"holder":"","ttlMs":30000}`, 400, "invalid_argument", "holder"},
		{"holder not printable", "POST", p + ":acquire", "application/json", `{"holder":"a\u0007","ttlMs":30000}`, 400, "invalid_argument", "holder"},
		{"holder too long", "POST", p + ":acquire", "application/json", `{"holder":"` + strings.Repeat("h", 257) + `","ttlMs":30000}`, 400, "invalid_argument", "holder"},
		{"holder a number", "POST", p + ":acquire", "application/json", `{"holder":7,"ttlMs":30000}`, 400, "invalid_argument", "holder"},
		{"missing ttl", "POST", p + ":acquire", "application/json", `{"holder":` + h + `}`, 400, "invalid_argument", "ttlMs"},
		{"ttl too short", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":999}`, 400, "invalid_argument", "ttlMs"},
		{"ttl too long", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":3600001}`, 400, "invalid_argument", "ttlMs"},
		{"ttl a string", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":"30000"}`, 400, "invalid_argument", "ttlMs"},
		{"ttl a fraction", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":30000.5}`, 400, "invalid_argument", "ttlMs"},
		{"ttl overflowing", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":99999999999999999999}`, 400, "invalid_argument", "ttlMs"},
		{"wait too long", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":30000,"waitMs":60001}`, 400, "invalid_argument", "waitMs"},
		{"metadata an array", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":30000,"metadata":[1]}`, 400, "invalid_argument", "metadata"},
		{"metadata null", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":30000,"metadata":null}`, 400, "invalid_argument", "metadata"},
		{"metadata over 16 KiB", "POST", p + ":acquire", "application/json", md17k, 400, "invalid_argument", "metadata"},
		{"unknown field", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":30000,"ttl":5}`, 400, "invalid_argument", "ttl"},
		{"malformed JSON", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":`, 400, "invalid_argument", "body"},
		{"trailing data", "POST", p + ":acquire", "application/json", `{"holder":` + h + `,"ttlMs":30000} {}`, 400, "invalid_argument", "body"},
		{"not an object", "POST", p + ":acquire", "application/json", `[{"holder":` + h + `}]`, 400, "invalid_argument", "body"},
		{"empty body", "POST", p + ":renew", "application/json", ``, 400, "invalid_argument", "body"},
		{"token a string", "POST", p + ":renew", "application/json", `{"holder":` + h + `,"fencingToken":"3"}`, 400, "invalid_argument", "fencingToken"},
		{"token zero", "POST", p + ":release", "application/json", `{"holder":` + h + `,"fencingToken":0}`, 400, "invalid_argument", "fencingToken"},
		{"token missing", "POST", p + ":release", "application/json", `{"holder":` + h + `}`, 400, "invalid_argument", "fencingToken"},
		{"renew ttl zero", "POST", p + ":renew", "application/json", `{"holder":` + h + `,"fencingToken":3,"ttlMs":0}`, 400, "invalid_argument", "ttlMs"},
		{"release unknown field", "POST", p + ":release", "application/json", `{"holder":` + h + `,"fencingToken":3,"ttlMs":1000}`, 400, "invalid_argument", "ttlMs"},
		{"body over 64 KiB", "POST", p + ":acquire", "application/json", big, 413, "payload_too_large", ""},
		{"text/plain", "POST", p + ":acquire", "text/plain", `{"holder":` + h + `,"ttlMs":30000}`, 415, "unsupported_media_type", ""},
		{"form", "POST", p + ":release", "application/x-www-form-urlencoded", `holder=x`, 415, "unsupported_media_type", ""},
		{"no content type", "POST", p + ":acquire", "", `{"holder":` + h + `,"ttlMs":30000}`, 415, "unsupported_media_type", ""},
		{"page token malformed", "GET", "/v1/leases?pageToken=%25%25", "", "", 400, "invalid_argument", "pageToken"},
		{"page size negative", "GET", "/v1/leases?pageSize=-1", "", "", 400, "invalid_argument", "pageSize"},
		{"page size not a number", "GET", "/v1/leases?pageSize=ten", "", "", 400, "invalid_argument", "pageSize"},
		{"prefix bad", "GET", "/v1/leases?prefix=a/b", "", "", 400, "invalid_argument", "prefix"},
		{"PUT a lease", "PUT", p, "application/json", `{}`, 405, "method_not_allowed", ""},
		{"GET acquire", "GET", p + ":acquire", "", "", 405, "method_not_allowed", ""},
		{"unknown custom method", "POST", p + ":steal", "application/json", `{}`, 404, "not_found", ""},
		{"unknown route", "GET", "/v2/leases", "", "", 404, "not_found", ""},
	}
	for _, tc := range cases {
		r := c.Do(t, tc.method, tc.path, tc.ct, tc.body)
		expect(t, tc.name, r, tc.status, tc.code)
		if tc.status == 405 && r.Header.Get("Allow") == "" {
			t.Errorf("%s: 405 without an Allow header", tc.name)
		}
		if tc.field == "" {
			continue
		}
		errs, _ := r.Body["errors"].([]any)
		found := false
		for _, e := range errs {
			if m, _ := e.(map[string]any); m["field"] == tc.field {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: errors %v do not name the field %q", tc.name, r.Body["errors"], tc.field)
		}
	}
}
