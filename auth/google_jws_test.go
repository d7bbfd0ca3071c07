package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// jwsAudience is the audience of the key server's authenticators.
const jwsAudience = "https://leases.example.com"

// keyServer is a local stand-in for Google's two certificate endpoints:
// RS256 keys (www.googleapis.com/oauth2/v3/certs) and IAP's ES256 keys
// (www.gstatic.com/iap/verify/public_key-jwk). It serves one RSA key "rsa1"
// and one P-256 key "ec1", each at its own endpoint, as Google does.
type keyServer struct {
	rsa  *rsa.PrivateKey
	ec   *ecdsa.PrivateKey
	srv  *httptest.Server
	hits atomic.Int64 // certificate requests served
}

func newKeyServer(tb testing.TB) *keyServer {
	tb.Helper()
	k := &keyServer{}
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		tb.Fatal(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		tb.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	rsaKeys, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kid": "rsa1", "kty": "RSA", "alg": "RS256", "use": "sig",
		"n": b64(k.rsa.N.Bytes()), "e": b64([]byte{1, 0, 1}),
	}}})
	if err != nil {
		tb.Fatal(err)
	}
	x, y := make([]byte, 32), make([]byte, 32)
	k.ec.X.FillBytes(x)
	k.ec.Y.FillBytes(y)
	ecKeys, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kid": "ec1", "kty": "EC", "alg": "ES256", "crv": "P-256", "use": "sig", "x": b64(x), "y": b64(y),
	}}})
	if err != nil {
		tb.Fatal(err)
	}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.hits.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		switch r.URL.Path {
		case "/oauth2/v3/certs":
			_, _ = w.Write(rsaKeys)
		case "/iap/verify/public_key-jwk":
			_, _ = w.Write(ecKeys)
		default:
			http.NotFound(w, r)
		}
	}))
	tb.Cleanup(k.srv.Close)
	return k
}

// authenticator is a Google authenticator with the real idtoken validator,
// whose certificate requests go to k.
func (k *keyServer) authenticator(tb testing.TB) Authenticator {
	tb.Helper()
	base, err := url.Parse(k.srv.URL)
	if err != nil {
		tb.Fatal(err)
	}
	inner := k.srv.Client().Transport
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "www.googleapis.com" && r.URL.Host != "www.gstatic.com" {
			return nil, errors.New("unexpected request to " + r.URL.String())
		}
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = base.Scheme, base.Host, ""
		return inner.RoundTrip(r)
	})}
	a, err := NewGoogle(tb.Context(), GoogleConfig{Audiences: []string{jwsAudience},
		ValidatorOptions: []idtoken.ClientOption{option.WithHTTPClient(client)}})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// sign returns the signature of signingInput: RS256 with the RSA key, or
// ES256 (r || s, 32 bytes each) with the P-256 key.
func (k *keyServer) sign(tb testing.TB, alg, signingInput string) []byte {
	tb.Helper()
	digest := sha256.Sum256([]byte(signingInput))
	if alg == "RS256" {
		sig, err := rsa.SignPKCS1v15(nil, k.rsa, crypto.SHA256, digest[:])
		if err != nil {
			tb.Fatal(err)
		}
		return sig
	}
	r, s, err := ecdsa.Sign(rand.Reader, k.ec, digest[:])
	if err != nil {
		tb.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return sig
}

// jws is the compact serialization of header, payload and signature.
func jws(header, payload string, sig []byte) string {
	b64 := base64.RawURLEncoding.EncodeToString
	return b64([]byte(header)) + "." + b64([]byte(payload)) + "." + b64(sig)
}

// goodClaims are claims that validate for jwsAudience, with a verified email
// and an exp that does not run out (2100-01-01).
const goodClaims = `{"iss":"https://accounts.google.com","aud":"https://leases.example.com","exp":4102444800,"email":"svc@p.iam.gserviceaccount.com","email_verified":true}`

// TestGoogleES256ShortSignature: a token with alg ES256, a key id the
// certificate endpoint lists and a signature shorter than 32 bytes made
// idtoken's validateES256 index out of range (a panic before any credential
// was checked). Such tokens, and every other malformed signature, are
// refused as unauthenticated before any certificate is fetched.
func TestGoogleES256ShortSignature(t *testing.T) {
	k := newKeyServer(t)
	a := k.authenticator(t)
	header := `{"alg":"ES256","kid":"ec1","typ":"JWT"}`
	for _, n := range []int{0, 1, 16, 31, 32, 63, 65, 128} {
		token := jws(header, goodClaims, make([]byte, n))
		principal, err := a.Authenticate(request("Bearer " + token))
		if principal != "" || !errors.Is(err, ErrUnauthenticated) || errors.Is(err, errValidatorPanic) {
			t.Errorf("ES256 with a %d-byte signature: Authenticate = %q, %v, want ErrUnauthenticated without a panic", n, principal, err)
			continue
		}
		if !strings.Contains(err.Error(), "ES256 signature must be 64 bytes") {
			t.Errorf("ES256 with a %d-byte signature: error %q does not say why", n, err)
		}
	}
	// The same header, key id and claims, properly signed, are accepted:
	// the checks before idtoken's do not refuse good tokens.
	signingInput := strings.Join(strings.Split(jws(header, goodClaims, nil), ".")[:2], ".")
	good := signingInput + "." + base64.RawURLEncoding.EncodeToString(k.sign(t, "ES256", signingInput))
	if p, err := a.Authenticate(request("Bearer " + good)); err != nil || p != "svc@p.iam.gserviceaccount.com" {
		t.Errorf("a good ES256 token: Authenticate = %q, %v", p, err)
	}
}

// TestGoogleJWSShape: tokens the compact JWS form or idtoken's needs rule
// out are refused, before any certificate is fetched, with a reason; good
// RS256 and ES256 tokens still pass.
func TestGoogleJWSShape(t *testing.T) {
	k := newKeyServer(t)
	a := k.authenticator(t)
	signed := func(alg, header, claims string) string {
		in := strings.Join(strings.Split(jws(header, claims, nil), ".")[:2], ".")
		return in + "." + base64.RawURLEncoding.EncodeToString(k.sign(t, alg, in))
	}
	rs := `{"alg":"RS256","kid":"rsa1","typ":"JWT"}`
	es := `{"alg":"ES256","kid":"ec1"}`
	good := signed("RS256", rs, goodClaims)
	b64 := base64.RawURLEncoding.EncodeToString
	goodSig := good[strings.LastIndexByte(good, '.')+1:]
	tests := []struct {
		name, token, why string
	}{
		{"two parts", "e30.e30", "three base64url parts"},
		{"four parts", good + ".x", "three base64url parts"},
		{"padding", good + "==", "base64url"},
		{"standard base64", strings.Replace(good, goodSig, strings.NewReplacer("-", "+", "_", "/").Replace(goodSig)+"+/", 1), "base64url"},
		{"line break in the signature", good[:len(good)-10] + "\n" + good[len(good)-10:], "control character"},
		{"empty header", "." + b64([]byte(goodClaims)) + "." + goodSig, "header"},
		{"header not JSON", jws("alg=RS256", goodClaims, []byte("x")), "header"},
		{"header a list", jws(`["RS256"]`, goodClaims, []byte("x")), "header"},
		{"alg none", jws(`{"alg":"none","kid":"rsa1"}`, goodClaims, []byte("x")), "RS256 or ES256"},
		{"alg missing", jws(`{"kid":"rsa1"}`, goodClaims, []byte("x")), "RS256 or ES256"},
		{"alg not a string", jws(`{"alg":256,"kid":"rsa1"}`, goodClaims, []byte("x")), "header"},
		{"kid missing", jws(`{"alg":"RS256"}`, goodClaims, []byte("x")), "kid"},
		{"RS256 without a signature", jws(rs, goodClaims, nil), "RS256 signature is empty"},
		{"ES256 short", jws(es, goodClaims, make([]byte, 31)), "ES256 signature must be 64 bytes"},
		// encoding/json matches keys case-insensitively and keeps the last
		// of duplicates: so does idtoken, so these are ES256 to both.
		{"ES256 by a key's case", jws(`{"ALG":"ES256","kid":"ec1"}`, goodClaims, make([]byte, 8)), "ES256 signature must be 64 bytes"},
		{"ES256 by a duplicate key", jws(`{"alg":"RS256","alg":"ES256","kid":"ec1"}`, goodClaims, make([]byte, 8)), "ES256 signature must be 64 bytes"},
		{"payload not base64url", strings.Replace(good, ".", ".*", 1), "base64url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := k.hits.Load()
			principal, err := a.Authenticate(request("Bearer " + tt.token))
			if principal != "" || !errors.Is(err, ErrUnauthenticated) || errors.Is(err, errValidatorPanic) {
				t.Fatalf("Authenticate = %q, %v, want ErrUnauthenticated", principal, err)
			}
			if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("error %q does not say %q", err, tt.why)
			}
			if strings.Contains(err.Error(), tt.token) {
				t.Errorf("error %q echoes the token", err)
			}
			if k.hits.Load() != before {
				t.Error("a malformed token made the validator fetch certificates")
			}
		})
	}
	for _, token := range []string{good, signed("ES256", es, goodClaims)} {
		if p, err := a.Authenticate(request("Bearer " + token)); err != nil || p != "svc@p.iam.gserviceaccount.com" {
			t.Errorf("a good token: Authenticate = %q, %v", p, err)
		}
	}
}

// TestGoogleValidatorPanicRecovered: should the validator panic all the
// same (a shape the checks before it miss), the request is refused as
// unauthenticated rather than dropped, without the token in the error.
func TestGoogleValidatorPanicRecovered(t *testing.T) {
	const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
	validate := func(_ context.Context, tok, _ string) (*idtoken.Payload, error) {
		var sig []byte
		_ = sig[:len(tok)] // out of range, as idtoken's ES256 check was
		return nil, nil
	}
	a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{"a", "b"}, Validate: validate})
	if err != nil {
		t.Fatal(err)
	}
	principal, err := a.Authenticate(request("Bearer " + token))
	if principal != "" || !errors.Is(err, ErrUnauthenticated) || !errors.Is(err, errValidatorPanic) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Authenticate = %q, %v, want ErrUnauthenticated from a recovered panic", principal, err)
	}
	if !strings.Contains(err.Error(), "out of range") || strings.Contains(err.Error(), token) {
		t.Errorf("error %q does not name the panic, or echoes the token", err)
	}
}

// FuzzGoogleToken builds tokens from a header, a payload and a signature
// (or a real signature by the key server's RSA or P-256 key, when sign is
// 1 or 2), with tail appended, and checks them with the real idtoken
// validator against the local key server: never a panic (not even one the
// authenticator recovers), and every token is accepted with its verified
// email or refused as unauthenticated.
func FuzzGoogleToken(f *testing.F) {
	f.Add([]byte(`{"alg":"ES256","kid":"ec1"}`), []byte(goodClaims), []byte("short"), uint8(0), "")
	f.Add([]byte(`{"alg":"RS256","kid":"rsa1"}`), []byte(goodClaims), []byte(nil), uint8(1), "")
	k := newKeyServer(f)
	a := k.authenticator(f)
	f.Fuzz(func(t *testing.T, header, payload, sig []byte, sign uint8, tail string) {
		b64 := base64.RawURLEncoding.EncodeToString
		signingInput := b64(header) + "." + b64(payload)
		switch sign % 3 {
		case 1:
			sig = k.sign(t, "RS256", signingInput)
		case 2:
			sig = k.sign(t, "ES256", signingInput)
		}
		token := signingInput + "." + b64(sig) + tail
		r := request()
		r.Header = http.Header{"Authorization": {"Bearer " + token}}
		principal, err := a.Authenticate(r)
		if errors.Is(err, errValidatorPanic) {
			t.Fatalf("the validator panicked: %v", err)
		}
		if err != nil {
			if principal != "" || !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("Authenticate = %q, %v, want only ErrUnauthenticated", principal, err)
			}
			if len(token) > 16 && strings.Contains(err.Error(), token) {
				t.Fatalf("error %q echoes the token", err)
			}
			return
		}
		// Accepted: only a token the key server signed, with its claims.
		var claims map[string]any // as idtoken reads them
		if sign%3 == 0 || json.Unmarshal(payload, &claims) != nil || principal != claims["email"] || principal == "" {
			t.Fatalf("accepted %q (signed %d) with payload %q", principal, sign%3, payload)
		}
	})
}
