package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// FuzzRequest sends arbitrary methods, paths with query strings, content
// types and bodies (invalid UTF-8 and repeated keys among them) through the
// handler: nothing may panic or answer 5xx, every error must be
// problem+json, a refused request must change nothing, every answer is
// valid UTF-8, and nothing stored holds invalid UTF-8 or a repeated key.
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
	f.Add("POST", "/v1/leases/a:acquire", "application/json", "{\"holder\":\"agent-\xff\",\"ttlMs\":1000}")
	f.Add("POST", "/v1/leases/a:acquire", "", `{"holder":"agent-\ud800","ttlMs":1000}`)
	f.Add("POST", "/v1/leases/b:acquire", "", "{\"holder\":\"h\",\"ttlMs\":1000,\"metadata\":{\"k\":\"\xfe\"}}")
	f.Add("POST", "/v1/leases/b:acquire", "", `{"holder":"a","holder":"b","ttlMs":1000}`)
	f.Add("POST", "/v1/leases/a:renew", "", `{"holder":"h","fencingToken":1,"metadata":{"x":{"y":1,"y":2}}}`)
	f.Add("GET", "/v1/leases?prefix=%zz", "", ``)
	f.Add("GET", "/v1/leases?prefx=&pageSize=1", "", ``)
	f.Add("GET", "/v1/leases?pageToken=%zz&prefix=a&prefix=b", "", ``)
	f.Add("HEAD", "/v1/leases/a:watch?x", "", ``)
	f.Add("GET", "/v1/leases/a?%ff=1", "", ``)
	// Succession (docs/contract.md §8): priorities, preemption, checkpoints
	// and :transfer, good and bad.
	f.Add("POST", "/v1/leases/a:acquire", "", `{"holder":"k","ttlMs":1000,"waitMs":5,"priority":7,"preempt":true}`)
	f.Add("POST", "/v1/leases/b:acquire", "", `{"holder":"k","ttlMs":1000,"priority":1000}`)
	f.Add("POST", "/v1/leases/a:acquire", "", `{"holder":"k","ttlMs":1000,"priority":1.5,"preempt":"yes"}`)
	f.Add("POST", "/v1/leases/a:acquire", "", `{"holder":"k","ttlMs":1000,"priority":-1,"preempt":true}`)
	f.Add("POST", "/v1/leases/a:renew", "", `{"holder":"h","fencingToken":1,"checkpoint":{"step":3,"done":["x"]}}`)
	f.Add("POST", "/v1/leases/a:renew", "", "{\"holder\":\"h\",\"fencingToken\":1,\"checkpoint\":{\"k\":\"\xfe\",\"k\":1}}")
	f.Add("POST", "/v1/leases/a:release", "", `{"holder":"h","fencingToken":1,"checkpoint":[]}`)
	f.Add("POST", "/v1/leases/a:transfer", "application/json", `{"holder":"h","fencingToken":1,"to":"k","checkpoint":{"s":1},"reserveMs":100}`)
	f.Add("POST", "/v1/leases/a:transfer", "", `{"holder":"h","fencingToken":1,"to":"h","reserveMs":0}`)
	f.Add("POST", "/v1/leases/a:transfer", "", `{"holder":"h","fencingToken":1,"to":"k","reserveMs":60001,"x":null}`)
	f.Add("POST", "/v1/leases/b:transfer", "", `{"holder":"h","fencingToken":1,"to":"k"}`)
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
		if _, err := lease.UpdateWith(t.Context(), store.Try, "a", func(s lease.Snapshot) (*lease.Record, error) {
			return &lease.Record{Name: "a", Holder: "h", FencingToken: 1, TTL: time.Minute, AcquireTime: s.ServerTime,
				RenewTime: s.ServerTime, ExpireTime: s.ServerTime.Add(time.Minute), Transitions: 1}, nil
		}); err != nil {
			t.Fatal(err)
		}
		stored, _, _ := store.List(t.Context(), "", "", 10)
		before, _ := lease.DecodeRows(stored)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond) // ends a :watch stream or a wait
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
		// A 503 or 504 is the answer to a client that gave up (the test's
		// deadline ended the request, as it ends streams and waits, on a
		// loaded machine sometimes mid-write); any other 5xx is a bug.
		gaveUp := ctx.Err() != nil && (w.Code == http.StatusServiceUnavailable || w.Code == http.StatusGatewayTimeout)
		if w.Code >= 500 && !gaveUp {
			t.Fatalf("%s %s (%s) %q = %d %s", method, path, contentType, body, w.Code, w.Body)
		}
		if !utf8.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s %q answered invalid UTF-8: %q", method, path, body, w.Body)
		}
		rows, now, _ := store.List(t.Context(), "", "", 10)
		after, err := lease.DecodeRows(rows)
		if err != nil {
			t.Fatalf("%s %s %q stored a row that does not decode: %v", method, path, body, err)
		}
		for _, rec := range after {
			if !utf8.ValidString(rec.Holder) || rec.Metadata != nil && !jsontext.Value(rec.Metadata).IsValid() {
				t.Fatalf("%s %s %q stored holder %q metadata %q", method, path, body, rec.Holder, rec.Metadata)
			}
			if rec.Checkpoint != nil && !jsontext.Value(rec.Checkpoint).IsValid() || !utf8.ValidString(rec.ReservedFor) {
				t.Fatalf("%s %s %q stored checkpoint %q reservedFor %q", method, path, body, rec.Checkpoint, rec.ReservedFor)
			}
		}
		if w.Code >= 400 {
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%d answered with Content-Type %q", w.Code, ct)
			}
			// A waiting candidate refused when its wait ran out leaves its
			// ended registration behind (it keeps the holder's place in line
			// for a moment, docs/contract.md §8); it ranks for nothing and no
			// answer shows it, so it is not a change.
			if !reflect.DeepEqual(withoutEnded(after, now), before) {
				t.Fatalf("refused request %s %s %q changed the store: %+v → %+v", method, path, body, before, after)
			}
		}
	})
}

// withoutEnded returns recs without the candidate registrations that ended
// before now.
func withoutEnded(recs []lease.Record, now time.Time) []lease.Record {
	out := make([]lease.Record, len(recs))
	for i, r := range recs {
		r.Candidates = slices.DeleteFunc(slices.Clone(r.Candidates), func(c lease.Candidate) bool { return !now.Before(c.Until) })
		if len(r.Candidates) == 0 {
			r.Candidates = nil
		}
		out[i] = r
	}
	return out
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
