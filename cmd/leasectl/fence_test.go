package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasesvc/leasesvc/fence"
)

// TestFenceJWKS: `leasectl fence jwks` prints the service's key set, sent
// without credentials, as a file fence.ParseJWKS loads; another fence
// command is a usage error.
func TestFenceJWKS(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/jwks.json" {
			http.NotFound(w, r)
			return
		}
		auth = r.Header.Get("Authorization")
		_ = json.NewEncoder(w).Encode(fence.JWKS{Keys: []fence.JWK{fence.NewJWK(pub)}})
	}))
	defer srv.Close()
	inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": srv.URL, "LEASESVC_TOKEN": "secret-token-0123456789"}, hc: srv.Client()}, "fence", "jwks")
	if inv.err != nil {
		t.Fatalf("fence jwks: %v (%s)", inv.err, inv.stderr)
	}
	keys, err := fence.ParseJWKS([]byte(inv.stdout))
	if err != nil || keys[fence.KeyID(pub)] == nil || auth != "" {
		t.Fatalf("printed %q (%v), Authorization %q; want the key, sent without credentials", inv.stdout, err, auth)
	}
	if inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": srv.URL}}, "fence", "keys"); inv.code != exitUsage {
		t.Fatalf("fence keys: exit %d, want %d", inv.code, exitUsage)
	}
}
