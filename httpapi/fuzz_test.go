package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
)

// FuzzRequest sends arbitrary methods, paths, content types and bodies
// through the handler: nothing may panic or answer 5xx, every error must be
// problem+json, and a refused request must change nothing.
func FuzzRequest(f *testing.F) {
	f.Add("POST", "/v1/leases/a:acquire", "application/json", `{"holder":"h","ttlMs":1000}`)
	f.Add("POST", "/v1/leases/a:renew", "", `{"holder":"h","fencingToken":1,"ttlMs":2000,"metadata":{}}`)
	f.Add("POST", "/v1/leases/a:release", "application/json; charset=utf-8", `{"holder":"h","fencingToken":1}`)
	f.Add("GET", "/v1/leases?prefix=a&pageSize=2&pageToken=x", "", ``)
	f.Add("POST", "/v1/leases/a:acquire", "application/json", `{"holder":"h","ttlMs":1e3,"metadata":{"a":[1,{"b":null}]},"waitMs":0}`)
	f.Add("POST", "/v1/leases/%2e%2e:acquire", "text/json", `[]`)
	f.Add("DELETE", "/v1/leases/a:b:c", "", `{`)
	f.Add("POST", "/v1/leases/a:revoke", "application/json", `{"reason":"stuck","fencingToken":1}`)
	f.Add("POST", "/v1/leases/a:revoke", "", `{"reason":"","fencingToken":-1,"x":1}`)
	f.Fuzz(func(t *testing.T, method, path, contentType, body string) {
		if !validMethod(method) {
			return
		}
		u, err := url.ParseRequestURI(path)
		if err != nil || !strings.HasPrefix(u.Path, "/") {
			return
		}
		store := memory.New()
		h := newHandler(t, store)
		// Lease "a" is held by "h" with token 1, so renew, release and
		// revoke inputs meet a live holding.
		if _, err := store.Try(t.Context(), "a", func(s backend.Snapshot) (*backend.Record, error) {
			return &backend.Record{Name: "a", Holder: "h", FencingToken: 1, TTL: time.Minute, AcquireTime: s.ServerTime,
				RenewTime: s.ServerTime, ExpireTime: s.ServerTime.Add(time.Minute), Transitions: 1}, nil
		}); err != nil {
			t.Fatal(err)
		}
		before, _, _ := store.List(t.Context(), "", "", 10)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond) // ends a :watch stream
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, "http://svc"+u.RequestURI(), strings.NewReader(body))
		if err != nil {
			return
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s (%s) %q = %d %s", method, path, contentType, body, w.Code, w.Body)
		}
		if w.Code >= 400 {
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%d answered with Content-Type %q", w.Code, ct)
			}
			after, _, _ := store.List(t.Context(), "", "", 10)
			if !reflect.DeepEqual(after, before) {
				t.Fatalf("refused request %s %s %q changed the store: %+v → %+v", method, path, body, before, after)
			}
		}
	})
}

// validMethod reports whether m is an HTTP token, as net/http requires.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, c) {
			return false
		}
	}
	return m != http.MethodConnect
}
