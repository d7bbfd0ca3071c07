package fence_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/fence"
)

// jwksServer serves the JWKS set in served (or 503 while it holds nil)
// and counts the fetches.
type jwksServer struct {
	*httptest.Server
	served  atomic.Pointer[fence.JWKS]
	fetches atomic.Int32
}

func newJWKSServer(t *testing.T, keys ...key) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.serve(keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		set := s.served.Load()
		if set == nil {
			http.Error(w, "backend unavailable", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(s.Close)
	return s
}

// serve makes the server list keys from now on.
func (s *jwksServer) serve(keys ...key) {
	set := fence.JWKS{Keys: []fence.JWK{}}
	for _, k := range keys {
		set.Keys = append(set.Keys, fence.NewJWK(k.pub))
	}
	s.served.Store(&set)
}

// TestRemoteKeysForgetsUnlistedKey: a long-running sink forgets a key once
// the service's JWKS no longer lists it (its retention ended), and answers
// unknown_key for its proofs as a sink that never fetched it does, with
// the defaults.
func TestRemoteKeysForgetsUnlistedKey(t *testing.T) {
	live, ended := newKey(t), newKey(t)
	srv := newJWKSServer(t, live, ended)
	now := time.Unix(1_800_000_000, 0)
	rk := &fence.RemoteKeys{URL: srv.URL, Client: srv.Client(), Now: func() time.Time { return now }}
	v, _ := fence.NewVerifier(rk, "")
	for _, k := range []key{live, ended} {
		if _, err := v.Verify(t.Context(), k.sign(t, claims("orders", 1))); err != nil {
			t.Fatalf("a listed key: %v", err)
		}
	}
	srv.serve(live)                    // the ended instance's retention ran out
	now = now.Add(30*24*time.Hour + 1) // LEASESVC_PROOF_KEY_RETENTION's default, and more
	_, err := v.Verify(t.Context(), ended.sign(t, claims("orders", 2)))
	if !errors.Is(err, fence.ErrUnknownKey) || fence.Reason(err) != "unknown_key" {
		t.Fatalf("a key the JWKS no longer lists, a retention later: %v (reason %q), want unknown_key", err, fence.Reason(err))
	}
	if _, err := v.Verify(t.Context(), live.sign(t, claims("orders", 3))); err != nil {
		t.Fatalf("the key still listed: %v", err)
	}
}

// TestRemoteKeysMaxAge: a key is answered from memory for MaxAge after the
// last fetch that listed it, even through a fetch that did not (an
// instance whose list lags); past that, its next proof fetches once and is
// unknown_key, and stays so without a fetch per proof. While the JWKS
// cannot be fetched, the keys known are still answered.
func TestRemoteKeysMaxAge(t *testing.T) {
	live, ended, stranger := newKey(t), newKey(t), newKey(t)
	srv := newJWKSServer(t, live, ended)
	start := time.Unix(1_800_000_000, 0)
	now := start
	rk := &fence.RemoteKeys{URL: srv.URL, Client: srv.Client(), Refetch: time.Minute, MaxAge: time.Hour,
		Now: func() time.Time { return now }}
	v, _ := fence.NewVerifier(rk, "")
	verify := func(k key) error {
		_, err := v.Verify(t.Context(), k.sign(t, claims("orders", 1)))
		return err
	}
	step := func(at time.Duration, k key, wantErr error, wantFetches int32) {
		t.Helper()
		now = start.Add(at)
		if err := verify(k); !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
			t.Fatalf("at +%v: %v, want %v", at, err, wantErr)
		}
		if n := srv.fetches.Load(); n != wantFetches {
			t.Fatalf("at +%v: %d fetches, want %d", at, n, wantFetches)
		}
	}
	step(0, ended, nil, 1)
	srv.serve(live)
	step(30*time.Minute, stranger, fence.ErrUnknownKey, 2) // a fetch that no longer lists ended
	step(30*time.Minute+time.Second, ended, nil, 2)        // listed 30 min ago: still answered
	step(time.Hour-time.Nanosecond, ended, nil, 2)
	step(time.Hour, ended, fence.ErrUnknownKey, 3)               // a MaxAge since it was listed: fetched, forgotten
	step(time.Hour+time.Second, ended, fence.ErrUnknownKey, 3)   // within Refetch: no fetch
	step(time.Hour+2*time.Minute, ended, fence.ErrUnknownKey, 4) // a fetch, and still not listed
	step(time.Hour+2*time.Minute, live, nil, 4)                  // listed at every fetch
	srv.served.Store(nil)                                        // the JWKS is unavailable
	step(3*time.Hour, live, nil, 5)                              // stale, the fetch fails: served
	step(3*time.Hour+time.Second, live, nil, 5)
	now = start.Add(3*time.Hour + 2*time.Minute)
	if err := verify(stranger); errors.Is(err, fence.ErrUnknownKey) || fence.Reason(err) != "keys_unavailable" {
		t.Fatalf("an unknown key while the JWKS is unavailable: %v (reason %q), want keys_unavailable", err, fence.Reason(err))
	}
	srv.serve() // back, listing nothing: the live key ended too
	step(3*time.Hour+4*time.Minute, live, fence.ErrUnknownKey, 7)
}
