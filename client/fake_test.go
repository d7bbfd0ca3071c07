package client_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLeases is a hand-written leasesvc with authentication and operator
// revocation, as the service's contract says they answer: acquire, renew,
// release, get and revoke of leases, with bearer tokens checked. It is not
// the real service (which gains these routes separately): it is just enough
// of the contract to test the client against.
//
// Tokens: "admin-token" is principal "admin@example" with the admin verb;
// any other non-empty bearer token T is principal "T" without it; no token
// is 401.
type fakeLeases struct {
	*httptest.Server
	now func() time.Time

	mu     sync.Mutex
	leases map[string]*fakeLease
	log    []fakeRequest
}

type fakeLease struct {
	holder, principal, revokedBy, revokeReason string
	token, transitions                         int64
	ttl                                        time.Duration
	acquired, renewed, expires                 time.Time
}

// fakeRequest is one request the fake answered.
type fakeRequest struct {
	Op, Name, Auth string
	Body           map[string]any
}

func newFakeLeases(t testing.TB, now func() time.Time) *fakeLeases {
	t.Helper()
	f := &fakeLeases{now: now, leases: map[string]*fakeLease{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// requests returns the requests of op (all when op is "") so far.
func (f *fakeLeases) requests(op string) []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var rs []fakeRequest
	for _, r := range f.log {
		if op == "" || r.Op == op {
			rs = append(rs, r)
		}
	}
	return rs
}

func (f *fakeLeases) serve(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/leases/")
	if !ok {
		problem(w, 404, "not_found", nil)
		return
	}
	name, op, _ := strings.Cut(rest, ":")
	if op == "" && r.Method == http.MethodGet {
		op = "get"
	}
	var body map[string]any
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			problem(w, 400, "invalid_argument", nil)
			return
		}
	}
	auth := r.Header.Get("Authorization")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, fakeRequest{Op: op, Name: name, Auth: auth, Body: body})
	principal, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || principal == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leasesvc"`)
		problem(w, 401, "unauthenticated", nil)
		return
	}
	if principal == "admin-token" {
		principal = "admin@example"
	}
	now := f.now()
	l := f.leases[name]
	held := l != nil && now.Before(l.expires)
	num := func(k string) int64 { v, _ := body[k].(float64); return int64(v) }
	str := func(k string) string { v, _ := body[k].(string); return v }
	switch op {
	case "get":
		if l == nil {
			problem(w, 404, "not_found", nil)
			return
		}
	case "acquire":
		ttl := time.Duration(num("ttlMs")) * time.Millisecond
		switch {
		case !held:
			if l == nil {
				l = &fakeLease{}
				f.leases[name] = l
			}
			*l = fakeLease{holder: str("holder"), principal: principal, token: l.token + 1, transitions: l.transitions + 1,
				ttl: ttl, acquired: now, renewed: now, expires: now.Add(ttl)}
		case l.holder == str("holder"):
			l.ttl, l.renewed, l.expires = ttl, now, now.Add(ttl)
		default:
			w.Header().Set("Retry-After", strconv.Itoa(int((l.expires.Sub(now)+time.Second-1)/time.Second)))
			problem(w, 409, "lease_held", map[string]any{"lease": f.wire(name, l, now)})
			return
		}
	case "renew":
		if !held || l.holder != str("holder") || l.token != num("fencingToken") {
			problem(w, 409, "lease_lost", nil)
			return
		}
		l.renewed, l.expires = now, now.Add(l.ttl)
	case "release":
		if l == nil || l.revokedBy != "" || l.holder != str("holder") || l.token != num("fencingToken") {
			problem(w, 409, "lease_lost", nil)
			return
		}
		if held {
			l.expires = now
		}
	case "revoke":
		reason := str("reason")
		switch {
		case principal != "admin@example":
			problem(w, 403, "permission_denied", nil)
			return
		case reason == "" || len(reason) > 512:
			problem(w, 400, "invalid_argument", map[string]any{"errors": []map[string]string{{"field": "reason", "detail": "1–512 printable characters"}}})
			return
		case l == nil:
			problem(w, 404, "not_found", nil)
			return
		case num("fencingToken") != 0 && (!held || l.token != num("fencingToken")):
			problem(w, 409, "lease_lost", nil)
			return
		case held:
			l.expires, l.revokedBy, l.revokeReason = now, principal, reason
		}
	default:
		problem(w, 404, "not_found", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(f.wire(name, l, now))
}

// wire is the lease's JSON as the API answers it.
func (f *fakeLeases) wire(name string, l *fakeLease, now time.Time) map[string]any {
	m := map[string]any{
		"name": name, "holder": l.holder, "fencingToken": l.token, "ttlMs": l.ttl.Milliseconds(),
		"acquireTime": l.acquired, "renewTime": l.renewed, "expireTime": l.expires,
		"held": now.Before(l.expires), "remainingMs": max(0, l.expires.Sub(now).Milliseconds()),
		"serverTime": now, "transitions": l.transitions, "metadata": map[string]any{}, "principal": l.principal,
	}
	if l.revokedBy != "" {
		m["revokedBy"], m["revokeReason"] = l.revokedBy, l.revokeReason
	}
	return m
}

// problem writes an RFC 9457 problem with the service's code.
func problem(w http.ResponseWriter, status int, code string, extra map[string]any) {
	p := map[string]any{"type": "urn:leasesvc:problem:" + code, "title": http.StatusText(status), "status": status, "code": code}
	for k, v := range extra {
		p[k] = v
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
