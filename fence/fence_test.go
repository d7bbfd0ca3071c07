package fence_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/fence"
)

// key is a test signing key and its kid.
type key struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	kid  string
}

func newKey(t *testing.T) key {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key{priv, pub, fence.KeyID(pub)}
}

func (k key) sign(t *testing.T, c fence.Claims) string {
	t.Helper()
	p, err := fence.Sign(k.priv, k.kid, c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func claims(name string, token int64) fence.Claims {
	return fence.Claims{Lease: name, FencingToken: token, Holder: "agent-1", Principal: "a@example.com", IssuedAt: 1_800_000_000, Issuer: "leasesvc"}
}

// reasons are the stable refusal codes the three SDKs share.
var reasons = map[error]string{fence.ErrMissing: "missing", fence.ErrMalformed: "malformed", fence.ErrSignature: "bad_signature",
	fence.ErrUnknownKey: "unknown_key", fence.ErrIssuer: "wrong_issuer", fence.ErrOtherLease: "other_lease", fence.ErrStale: "stale"}

// TestGuardRefusals: a proof the service's key signed is admitted; each
// way of forging, altering or replaying one is refused with its own error
// and status.
func TestGuardRefusals(t *testing.T) {
	k, other := newKey(t), newKey(t)
	v, err := fence.NewVerifier(fence.StaticKeys{k.kid: k.pub}, "leasesvc")
	if err != nil {
		t.Fatal(err)
	}
	g := fence.NewGuard(v)
	if _, err := g.Check(t.Context(), "orders", k.sign(t, claims("orders", 7))); err != nil {
		t.Fatalf("a valid proof: %v", err)
	}
	valid := k.sign(t, claims("orders", 8))
	parts := strings.Split(valid, ".")
	forgedPayload, _ := json.Marshal(claims("orders", 9999))
	otherIssuer := claims("orders", 9)
	otherIssuer.Issuer = "evil"
	for _, tc := range []struct {
		name, lease, proof string
		want               error
		status             int
	}{
		{"bare token", "orders", "9999", fence.ErrMalformed, 403},
		{"no proof", "orders", "", fence.ErrMissing, 401},
		{"tampered payload", "orders", parts[0] + "." + base64.RawURLEncoding.EncodeToString(forgedPayload) + "." + parts[2], fence.ErrSignature, 403},
		{"wrong signature", "orders", func() string {
			p := other.sign(t, claims("orders", 9999))
			return strings.Replace(p, p[:strings.IndexByte(p, '.')], parts[0], 1)
		}(), fence.ErrSignature, 403},
		{"unknown kid", "orders", other.sign(t, claims("orders", 9999)), fence.ErrUnknownKey, 403},
		{"other lease", "orders", k.sign(t, claims("billing", 9999)), fence.ErrOtherLease, 403},
		{"lower token after higher", "orders", k.sign(t, claims("orders", 6)), fence.ErrStale, 409},
		{"other issuer", "orders", k.sign(t, otherIssuer), fence.ErrIssuer, 403},
		{"alg none", "orders", base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"`+k.kid+`","typ":"leasesvc-fence+jwt"}`)) + "." + parts[1] + ".", fence.ErrMalformed, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := g.Check(t.Context(), tc.lease, tc.proof)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Check = %v, want %v", err, tc.want)
			}
			if s := fence.Status(err); s != tc.status {
				t.Errorf("Status = %d, want %d", s, tc.status)
			}
			if r := fence.Reason(err); r != reasons[tc.want] {
				t.Errorf("Reason = %q, want %q (the Python and TypeScript reason)", r, reasons[tc.want])
			}
		})
	}
	if r := fence.Reason(errors.New("keys: connection refused")); r != "keys_unavailable" {
		t.Errorf("Reason of a key fetch failure = %q, want keys_unavailable", r)
	}
	if h := g.Highest("orders"); h != 7 {
		t.Errorf("after the refusals the highest token is %d, want 7 (refused proofs change nothing)", h)
	}
	for _, tok := range []int64{8, 8, 9} { // equal tokens: one holder writes many times
		if _, err := g.Check(t.Context(), "orders", k.sign(t, claims("orders", tok))); err != nil {
			t.Fatalf("token %d after 7: %v", tok, err)
		}
	}
}

// TestRemoteKeysRefetch: an unknown kid fetches the JWKS again, at most
// once per Refetch however many proofs come under invented kids.
func TestRemoteKeysRefetch(t *testing.T) {
	k1, k2, stranger := newKey(t), newKey(t), newKey(t)
	var served atomic.Value
	served.Store(fence.JWKS{Keys: []fence.JWK{fence.NewJWK(k1.pub)}})
	var fetches atomic.Int32
	var asked atomic.Value // the kid of the last fetch
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		asked.Store(r.URL.Query().Get("kid"))
		_ = json.NewEncoder(w).Encode(served.Load())
	}))
	defer srv.Close()
	now := time.Unix(1_800_000_000, 0)
	rk := &fence.RemoteKeys{URL: srv.URL, Client: srv.Client(), Refetch: time.Minute, Now: func() time.Time { return now }}
	v, _ := fence.NewVerifier(rk, "")
	if _, err := v.Verify(t.Context(), k1.sign(t, claims("a", 1))); err != nil {
		t.Fatal(err)
	}
	served.Store(fence.JWKS{Keys: []fence.JWK{fence.NewJWK(k1.pub), fence.NewJWK(k2.pub)}}) // a new instance started
	for range 5 {
		if _, err := v.Verify(t.Context(), stranger.sign(t, claims("a", 2))); !errors.Is(err, fence.ErrUnknownKey) {
			t.Fatalf("a stranger's key: %v, want ErrUnknownKey", err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches within Refetch, want 1", n)
	}
	now = now.Add(time.Minute)
	if _, err := v.Verify(t.Context(), k2.sign(t, claims("a", 3))); err != nil {
		t.Fatalf("the new instance's key after Refetch: %v", err)
	}
	if asked.Load() != k2.kid {
		t.Errorf("the fetch asked for kid %v, want %s (so that the instance reads the backend)", asked.Load(), k2.kid)
	}
	if _, err := v.Verify(t.Context(), k1.sign(t, claims("a", 4))); err != nil || fetches.Load() != 2 {
		t.Fatalf("a known key: %v after %d fetches, want nil after 2", err, fetches.Load())
	}
}

// TestMiddleware: the header's proof is checked before the handler runs,
// which sees its claims; a missing or stale one never reaches it.
func TestMiddleware(t *testing.T) {
	k := newKey(t)
	v, _ := fence.NewVerifier(fence.StaticKeys{k.kid: k.pub}, "")
	var wrote []int64
	h := fence.NewGuard(v).Middleware(func(r *http.Request) string { return r.PathValue("name") }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := fence.FromContext(r.Context())
		wrote = append(wrote, c.FencingToken)
	}))
	mux := http.NewServeMux()
	mux.Handle("PUT /data/{name}", h)
	for _, tc := range []struct {
		proof  string
		status int
	}{
		{"", 401},
		{k.sign(t, claims("orders", 5)), 200},
		{k.sign(t, claims("orders", 4)), 409},
		{"5", 403},
		{k.sign(t, claims("orders", 5)), 200},
	} {
		r := httptest.NewRequest("PUT", "/data/orders", nil)
		if tc.proof != "" {
			r.Header.Set(fence.Header, tc.proof)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != tc.status {
			t.Errorf("proof %.20q: status %d (%s), want %d", tc.proof, w.Code, strings.TrimSpace(w.Body.String()), tc.status)
		}
	}
	if len(wrote) != 2 || wrote[0] != 5 || wrote[1] != 5 {
		t.Errorf("the handler ran for tokens %v, want [5 5]", wrote)
	}
}

// TestParseJWKS: a kid that is not its key's thumbprint is refused, so a
// JWKS cannot rename a key; a key of another type is left out.
func TestParseJWKS(t *testing.T) {
	k, other := newKey(t), newKey(t)
	j := fence.NewJWK(k.pub)
	j.Kid = other.kid
	data, _ := json.Marshal(fence.JWKS{Keys: []fence.JWK{j}})
	if _, err := fence.ParseJWKS(data); err == nil || !strings.Contains(err.Error(), "thumbprint") {
		t.Fatalf("ParseJWKS of a renamed key: %v, want a thumbprint error", err)
	}
	data, _ = json.Marshal(fence.JWKS{Keys: []fence.JWK{fence.NewJWK(k.pub), {Kty: "RSA", Kid: "rsa-1"}}})
	keys, err := fence.ParseJWKS(data) // the RSA key is left out
	if err != nil || len(keys) != 1 {
		t.Fatalf("ParseJWKS = %v, %v", keys, err)
	}
}

// BenchmarkSign is the cost signing adds to an acquire (issue 39: at most
// 0.05 ms of p50).
func BenchmarkSign(b *testing.B) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	hdr := fence.EncodedHeader("kid")
	c := claims("orders", 7)
	for b.Loop() {
		if _, err := fence.SignWithHeader(priv, hdr, c); err != nil {
			b.Fatal(err)
		}
	}
}
