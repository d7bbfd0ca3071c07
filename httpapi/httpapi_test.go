package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/lease"
)

func newHandler(t testing.TB, store backend.Store) http.Handler {
	t.Helper()
	m, err := lease.NewManager(store, lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestFlowsInProcess runs the e2e flows against the handler in-process, so
// that go test -cover sees them.
func TestFlowsInProcess(t *testing.T) {
	srv := httptest.NewServer(newHandler(t, memory.New()))
	defer srv.Close()
	e2e.Flows(t, srv.URL)
}

// failingStore is a backend whose every call fails with err.
type failingStore struct{ err error }

func (f failingStore) Get(context.Context, string) (backend.Snapshot, error) {
	return backend.Snapshot{}, f.err
}
func (f failingStore) Try(context.Context, string, backend.Decide) (backend.Snapshot, error) {
	return backend.Snapshot{}, f.err
}
func (f failingStore) List(context.Context, string, string, int) ([]backend.Row, time.Time, error) {
	return nil, time.Time{}, f.err
}
func (f failingStore) Ping(context.Context) error { return f.err }

func TestBackendErrorsMapToStatus(t *testing.T) {
	cases := []struct {
		err        error
		status     int
		code       string
		retryAfter bool
	}{
		{fmt.Errorf("%w: %w", backend.ErrUnavailable, errors.New("connection refused")), 503, "unavailable", true},
		{context.DeadlineExceeded, 504, "deadline_exceeded", false},
		{errors.New("a bug"), 500, "internal", false},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			h := newHandler(t, failingStore{tc.err})
			for _, req := range []*http.Request{
				apiRequest("POST", "/v1/leases/x:acquire", strings.NewReader(`{"holder":"a","ttlMs":1000}`)),
				apiRequest("POST", "/v1/leases/x:renew", strings.NewReader(`{"holder":"a","fencingToken":1}`)),
				apiRequest("POST", "/v1/leases/x:release", strings.NewReader(`{"holder":"a","fencingToken":1}`)),
				apiRequest("GET", "/v1/leases/x", nil),
				apiRequest("GET", "/v1/leases", nil),
			} {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				var p struct{ Code string }
				_ = json.Unmarshal(w.Body.Bytes(), &p)
				if w.Code != tc.status || p.Code != tc.code {
					t.Errorf("%s %s = %d %s, want %d %s", req.Method, req.URL.Path, w.Code, w.Body, tc.status, tc.code)
				}
				if got := w.Header().Get("Retry-After") != ""; got != tc.retryAfter {
					t.Errorf("%s %s: Retry-After present %v, want %v", req.Method, req.URL.Path, got, tc.retryAfter)
				}
			}
		})
	}
}

func TestReadyz(t *testing.T) {
	for _, tc := range []struct {
		store  backend.Store
		status int
	}{
		{memory.New(), 200},
		{failingStore{fmt.Errorf("%w: down", backend.ErrUnavailable)}, 503},
	} {
		w := httptest.NewRecorder()
		newHandler(t, tc.store).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
		if w.Code != tc.status {
			t.Errorf("readyz = %d %s, want %d", w.Code, w.Body, tc.status)
		}
	}
	w := httptest.NewRecorder()
	newHandler(t, failingStore{errors.New("down")}).ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
	if w.Code != 200 {
		t.Errorf("healthz with a failing backend = %d, want 200 (liveness does not depend on the backend)", w.Code)
	}
}

func TestNewChecksConfig(t *testing.T) {
	m, _ := lease.NewManager(memory.New(), lease.Config{})
	if _, err := httpapi.New(nil, httpapi.Config{}); err == nil {
		t.Error("New(nil manager) succeeded")
	}
	if _, err := httpapi.New(m, httpapi.Config{RequestTimeout: -1}); err == nil || !strings.Contains(err.Error(), "RequestTimeout") {
		t.Errorf("New(negative RequestTimeout) = %v, want an error naming it", err)
	}
}

// apiRequest is a request to the handler as a local client sends it: to
// localhost (with authentication off only a loopback Host is served), with
// Content-Type: application/json when it has a body.
func apiRequest(method, path string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, "http://localhost"+path, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}
