package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/leasesvc/leasesvc/client"
)

// recorder answers every request with one status and body and records the
// Authorization header of each, marking any request whose
// X-Serverless-Authorization header (for Cloud Run's own check) differs.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
	paths []string
}

func newRecorder(t *testing.T, h http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		a := req.Header.Get("Authorization")
		if x := req.Header.Get("X-Serverless-Authorization"); x != a {
			a += " but X-Serverless-Authorization " + x
		}
		r.auths = append(r.auths, a)
		r.paths = append(r.paths, req.URL.Path)
		r.mu.Unlock()
		h(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auths...)
}

const leaseBody = `{"name":"jobs","holder":"a","fencingToken":3,"ttlMs":30000,"held":true,"metadata":{}}`

func okLease(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, ":watch") {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = fmt.Fprintf(w, "event: lease\ndata: %s\n\n", leaseBody)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(leaseBody))
}

// TestBearerToken: with a TokenSource every request, watch streams
// included, carries its token as a bearer token; without one, none does.
func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   oauth2.TokenSource
		want string
	}{
		{"static token", client.StaticToken("s3cret"), "Bearer s3cret"},
		{"no token source", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecorder(t, okLease)
			c, err := client.New(srv.URL, client.Config{TokenSource: tc.ts})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if _, err := c.Get(ctx, "jobs"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Acquire(ctx, "jobs", client.AcquireRequest{Holder: "a", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Revoke(ctx, "jobs", client.RevokeRequest{Reason: "r"}); err != nil {
				t.Fatal(err)
			}
			st, err := c.Watch(ctx, "jobs")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Next(); err != nil {
				t.Fatal(err)
			}
			_ = st.Close()
			got := srv.seen()
			if len(got) != 4 {
				t.Fatalf("%d requests, want 4", len(got))
			}
			for i, a := range got {
				if a != tc.want {
					t.Errorf("request %d (%s): Authorization %q, want %q", i, srv.paths[i], a, tc.want)
				}
			}
		})
	}
}

// countingSource hands out tok-1, tok-2, … expiring after life, and counts
// the calls.
type countingSource struct {
	n    atomic.Int32
	life time.Duration
}

func (s *countingSource) Token() (*oauth2.Token, error) {
	n := s.n.Add(1)
	return &oauth2.Token{AccessToken: fmt.Sprintf("tok-%d", n), Expiry: time.Now().Add(s.life)}, nil
}

// TestTokenFetchedPerRequest: the token source is asked for every request
// (through oauth2.ReuseTokenSource): a token that expires is replaced on the
// next request, a token that lasts is reused.
func TestTokenFetchedPerRequest(t *testing.T) {
	srv := newRecorder(t, okLease)
	short := &countingSource{life: 0} // expired at once
	c, err := client.New(srv.URL, client.Config{TokenSource: short})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Get(t.Context(), "jobs"); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(srv.seen(), ","); got != "Bearer tok-1,Bearer tok-2,Bearer tok-3" {
		t.Fatalf("expiring tokens sent as %s", got)
	}
	long := &countingSource{life: time.Hour}
	c, err = client.New(srv.URL, client.Config{TokenSource: long})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Get(t.Context(), "jobs"); err != nil {
			t.Fatal(err)
		}
	}
	if n := long.n.Load(); n != 1 {
		t.Fatalf("a token valid for an hour was fetched %d times for 3 requests", n)
	}
}

type failingSource struct {
	calls atomic.Int32
	err   error
	tok   *oauth2.Token
}

func (s *failingSource) Token() (*oauth2.Token, error) {
	s.calls.Add(1)
	return s.tok, s.err
}

// blockingSource does not answer until release is closed.
type blockingSource struct{ release chan struct{} }

func (s blockingSource) Token() (*oauth2.Token, error) {
	<-s.release
	return nil, errors.New("too late")
}

// TestTokenSourceErrors: a token source that fails, gives an empty token or
// hangs fails the call with ErrCredentials, wrapping its error; nothing is
// sent and the call is not retried.
func TestTokenSourceErrors(t *testing.T) {
	metadataDown := errors.New("metadata server: connection refused")
	block := blockingSource{release: make(chan struct{})}
	defer close(block.release)
	for _, tc := range []struct {
		name string
		ts   oauth2.TokenSource
		want error // also matched, besides ErrCredentials
		text string
	}{
		{"error", &failingSource{err: metadataDown}, metadataDown, "connection refused"},
		{"empty token", &failingSource{tok: &oauth2.Token{}}, nil, "empty token"},
		{"no token", &failingSource{}, nil, "gave no token"},
		{"hangs", block, nil, "did not answer within 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecorder(t, okLease)
			c, err := client.New(srv.URL, client.Config{TokenSource: tc.ts, RequestTimeout: 50 * time.Millisecond,
				MaxAttempts: 4, Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Get(t.Context(), "jobs")
			if !errors.Is(err, client.ErrCredentials) || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Get = %v, want ErrCredentials saying %q", err, tc.text)
			}
			for _, other := range []error{client.ErrDenied, client.ErrUnavailable, client.ErrInvalid} {
				if errors.Is(err, other) {
					t.Errorf("%v also matches %v", err, other)
				}
			}
			if fs, ok := tc.ts.(*failingSource); ok && fs.calls.Load() != 1 {
				t.Errorf("token source asked %d times, want once (no retries)", fs.calls.Load())
			}
			if _, err := c.Watch(t.Context(), "jobs"); !errors.Is(err, client.ErrCredentials) {
				t.Errorf("Watch = %v, want ErrCredentials", err)
			}
			if n := len(srv.seen()); n != 0 {
				t.Fatalf("%d requests sent without credentials", n)
			}
		})
	}
	// The caller's own deadline ends a wait for the token with the
	// context's error.
	c, _ := client.New("http://127.0.0.1:1", client.Config{TokenSource: block})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "jobs"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with a deadline, token source hanging: %v", err)
	}
}

// deny answers every request with a status and, when code is set, a
// problem of that code.
func deny(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if status == 401 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasesvc"`)
		}
		if code == "" {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(status)
			_, _ = w.Write([]byte("<html>Your client does not have permission</html>"))
			return
		}
		problem(w, status, code, map[string]any{"detail": "test"})
	}
}

// TestDeniedNotRetried: 401 and 403 map to their sentinels (within
// ErrDenied), from the problem's code or, from a proxy's page without one,
// the status; they are sent once.
func TestDeniedNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name       string
		h          http.HandlerFunc
		want, not  error
		wantString string
	}{
		{"401 problem", deny(401, "unauthenticated"), client.ErrUnauthenticated, client.ErrPermissionDenied, "unauthenticated (401 unauthenticated): test"},
		{"403 problem", deny(403, "permission_denied"), client.ErrPermissionDenied, client.ErrUnauthenticated, "permission denied (403 permission_denied): test"},
		{"401 page", deny(401, ""), client.ErrUnauthenticated, client.ErrPermissionDenied, "unauthenticated (401)"},
		{"403 page", deny(403, ""), client.ErrPermissionDenied, client.ErrUnauthenticated, "permission denied (403)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecorder(t, tc.h)
			c, err := client.New(srv.URL, client.Config{TokenSource: client.StaticToken("t"), MaxAttempts: 4,
				Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Renew(t.Context(), "jobs", client.RenewRequest{Holder: "a", FencingToken: 1})
			var e *client.Error
			if !errors.Is(err, tc.want) || !errors.Is(err, client.ErrDenied) || errors.Is(err, tc.not) ||
				errors.Is(err, client.ErrUnavailable) || !errors.As(err, &e) || !strings.Contains(err.Error(), tc.wantString) {
				t.Fatalf("renew = %v, want %v (and ErrDenied) saying %q", err, tc.want, tc.wantString)
			}
			if n := len(srv.seen()); n != 1 {
				t.Fatalf("%d requests, want 1: %v is not retried", n, tc.want)
			}
		})
	}
}

// TestRateLimitedHonoursRetryAfter: a 429 is retried no earlier than its
// Retry-After, even beyond Backoff.Max; when the context's deadline comes
// first it is not retried; when retries run out it is ErrRateLimited and
// ErrUnavailable.
func TestRateLimitedHonoursRetryAfter(t *testing.T) {
	var limited atomic.Int32 // how many more requests get 429
	var times []time.Time
	var mu sync.Mutex
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if limited.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "1")
			problem(w, 429, "resource_exhausted", map[string]any{"detail": "rate limit of admin@example"})
			return
		}
		okLease(w, r)
	})
	c, err := client.New(srv.URL, client.Config{MaxAttempts: 3, Backoff: client.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	limited.Store(1)
	if _, err := c.Get(t.Context(), "jobs"); err != nil {
		t.Fatalf("429 then 200: %v", err)
	}
	mu.Lock()
	if len(times) != 2 || times[1].Sub(times[0]) < time.Second {
		t.Fatalf("%d requests, the retry %v after the 429; want 2, at least Retry-After (1s) apart", len(times), times[len(times)-1].Sub(times[0]))
	}
	times = nil
	mu.Unlock()

	// A deadline before the Retry-After: answered at once with the 429
	// (waiting would have ended in the context's error instead).
	limited.Store(1)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = c.Get(ctx, "jobs")
	var e *client.Error
	if !errors.Is(err, client.ErrRateLimited) || !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &e) ||
		e.RetryAfter != time.Second || e.Status != 429 || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("429 with a deadline before its Retry-After: %v; want ErrRateLimited at once", err)
	}
	if n := len(srv.seen()); n != 3 {
		t.Fatalf("%d requests in all, want 3", n)
	}
	// Every attempt limited (no Retry-After here: plain backoff).
	limited.Store(1000)
	srv2 := newRecorder(t, deny(429, "resource_exhausted"))
	c2, _ := client.New(srv2.URL, client.Config{MaxAttempts: 3, Backoff: client.Backoff{Initial: time.Millisecond, Max: time.Millisecond}})
	if _, err := c2.Get(t.Context(), "jobs"); !errors.Is(err, client.ErrRateLimited) || !strings.Contains(err.Error(), "rate limited (429 resource_exhausted)") || len(srv2.seen()) != 3 {
		t.Fatalf("429 every time: %v after %d requests; want ErrRateLimited after 3", err, len(srv2.seen()))
	}
}
