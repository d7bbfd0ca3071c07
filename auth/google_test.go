package auth

import (
	"bufio"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// fakeValidator accepts the tokens in its map for their audience, as the
// real validator would after checking the signature and expiry.
type fakeValidator struct {
	tokens map[string]*idtoken.Payload // token → payload
	err    error                       // returned for every token, if set
	calls  []string                    // audiences asked for
}

func (f *fakeValidator) validate(_ context.Context, token, audience string) (*idtoken.Payload, error) {
	f.calls = append(f.calls, audience)
	if f.err != nil {
		return nil, f.err
	}
	p, ok := f.tokens[token]
	if !ok {
		return nil, errors.New("idtoken: invalid token")
	}
	if p.Audience != audience {
		return nil, fmt.Errorf("idtoken: audience provided does not match aud claim in the JWT")
	}
	return p, nil
}

func payload(aud string, claims map[string]any) *idtoken.Payload {
	return &idtoken.Payload{Issuer: "https://accounts.google.com", Audience: aud, Expires: time.Now().Add(time.Hour).Unix(), Claims: claims}
}

// timeoutError is a net.Error that is not a *url.Error.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func TestGoogleAuthenticate(t *testing.T) {
	const aud = "https://leases.example.com"
	verified := map[string]any{"email": "svc@proj.iam.gserviceaccount.com", "email_verified": true}
	tokens := map[string]*idtoken.Payload{
		"good":            payload(aud, verified),
		"other-audience":  payload("https://other.example.com", verified),
		"string-verified": payload(aud, map[string]any{"email": "a@example.com", "email_verified": "true"}),
		"unverified":      payload(aud, map[string]any{"email": "a@example.com", "email_verified": false}),
		"string-false":    payload(aud, map[string]any{"email": "a@example.com", "email_verified": "false"}),
		"no-verified":     payload(aud, map[string]any{"email": "a@example.com"}),
		"no-email":        payload(aud, map[string]any{"email_verified": true, "sub": "1234"}),
		"empty-email":     payload(aud, map[string]any{"email": "", "email_verified": true}),
		"number-email":    payload(aud, map[string]any{"email": 7, "email_verified": true}),
		"space-email":     payload(aud, map[string]any{"email": "a b@example.com", "email_verified": true}),
	}
	tests := []struct {
		name      string
		audiences []string
		host      string
		header    string
		err       error // validator error for every token
		principal string
		wantErr   error
		errText   string
	}{
		{name: "good", audiences: []string{aud}, header: "Bearer good", principal: "svc@proj.iam.gserviceaccount.com"},
		{name: "email_verified as a string", audiences: []string{aud}, header: "Bearer string-verified", principal: "a@example.com"},
		{name: "wrong audience", audiences: []string{aud}, header: "Bearer other-audience", wantErr: ErrUnauthenticated, errText: "audience"},
		{name: "second audience", audiences: []string{aud, "https://other.example.com"}, header: "Bearer other-audience", principal: "svc@proj.iam.gserviceaccount.com"},
		{name: "unknown token", audiences: []string{aud}, header: "Bearer forged", wantErr: ErrUnauthenticated, errText: "invalid Google ID token"},
		{name: "unverified email", audiences: []string{aud}, header: "Bearer unverified", wantErr: ErrUnauthenticated, errText: "not verified"},
		{name: "email_verified string false", audiences: []string{aud}, header: "Bearer string-false", wantErr: ErrUnauthenticated, errText: "not verified"},
		{name: "no email_verified", audiences: []string{aud}, header: "Bearer no-verified", wantErr: ErrUnauthenticated, errText: "not verified"},
		{name: "no email", audiences: []string{aud}, header: "Bearer no-email", wantErr: ErrUnauthenticated, errText: "no email claim"},
		{name: "empty email", audiences: []string{aud}, header: "Bearer empty-email", wantErr: ErrUnauthenticated, errText: "no email claim"},
		{name: "email not a string", audiences: []string{aud}, header: "Bearer number-email", wantErr: ErrUnauthenticated, errText: "no email claim"},
		{name: "email with whitespace", audiences: []string{aud}, header: "Bearer space-email", wantErr: ErrUnauthenticated, errText: "whitespace"},
		{name: "no header", audiences: []string{aud}, wantErr: ErrUnauthenticated, errText: "missing Authorization header"},
		{name: "basic", audiences: []string{aud}, header: "Basic Z29vZA==", wantErr: ErrUnauthenticated, errText: "must be Bearer"},
		{name: "url error", audiences: []string{aud}, header: "Bearer good",
			err: &url.Error{Op: "Get", URL: "https://www.googleapis.com/oauth2/v3/certs", Err: errors.New("connection refused")}, wantErr: ErrUnavailable},
		{name: "net error", audiences: []string{aud}, header: "Bearer good", err: fmt.Errorf("fetch: %w", timeoutError{}), wantErr: ErrUnavailable},
		{name: "deadline", audiences: []string{aud}, header: "Bearer good", err: fmt.Errorf("fetch: %w", context.DeadlineExceeded), wantErr: ErrUnavailable},
		{name: "cert endpoint failing", audiences: []string{aud}, header: "Bearer good",
			err: errors.New("idtoken: unable to retrieve cert, got status code 503"), wantErr: ErrUnavailable},
		{name: "other validator error", audiences: []string{aud}, header: "Bearer good", err: errors.New("idtoken: token expired"), wantErr: ErrUnauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeValidator{tokens: tokens, err: tt.err}
			a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: tt.audiences, Validate: fake.validate})
			if err != nil {
				t.Fatal(err)
			}
			r := request()
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			switch tt.host {
			case "":
			case "-":
				r.Host = ""
			default:
				r.Host = tt.host
			}
			principal, err := a.Authenticate(r)
			if tt.wantErr == nil {
				if err != nil || principal != tt.principal {
					t.Fatalf("Authenticate = %q, %v, want %q", principal, err, tt.principal)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || principal != "" {
				t.Fatalf("Authenticate = %q, %v, want error %v", principal, err, tt.wantErr)
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("error %v does not wrap the validator's error", err)
			}
			if !strings.Contains(err.Error(), tt.errText) {
				t.Errorf("error %q does not say %q", err, tt.errText)
			}
			if (tt.wantErr == ErrUnavailable) == errors.Is(err, ErrUnauthenticated) {
				t.Errorf("error %v wraps both or neither sentinel", err)
			}
		})
	}
}

// TestGoogleAudienceNeverFromRequest: the audiences are required, and
// neither the Host header nor an absolute URL in the request line adds one.
func TestGoogleAudienceNeverFromRequest(t *testing.T) {
	fake := &fakeValidator{tokens: map[string]*idtoken.Payload{}}
	if _, err := NewGoogle(t.Context(), GoogleConfig{Validate: fake.validate}); err == nil || !strings.Contains(err.Error(), "Audiences") {
		t.Fatalf("NewGoogle without audiences = %v, want an error naming Audiences", err)
	}
	a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{"https://leases.example.com"}, Validate: fake.validate})
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
		"GET https://other.example.com/v1/leases HTTP/1.1\r\nHost: evil.example.com\r\nAuthorization: Bearer x\r\n\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = a.Authenticate(r)
	if len(fake.calls) != 1 || fake.calls[0] != "https://leases.example.com" {
		t.Errorf("validated for audiences %q, want only the configured https://leases.example.com", fake.calls)
	}
}

func TestGoogleUnavailableWinsOverInvalid(t *testing.T) {
	// The first audience does not match; the second could not be checked:
	// the token might be good, so the answer is "try later", not 401.
	calls := 0
	validate := func(context.Context, string, string) (*idtoken.Payload, error) {
		calls++
		if calls == 1 {
			return nil, errors.New("idtoken: audience provided does not match aud claim in the JWT")
		}
		return nil, &url.Error{Op: "Get", URL: "https://www.googleapis.com/oauth2/v3/certs", Err: timeoutError{}}
	}
	a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{"a", "b"}, Validate: validate})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(request("Bearer t")); !errors.Is(err, ErrUnavailable) || calls != 2 {
		t.Errorf("Authenticate = %v after %d calls, want ErrUnavailable after 2", err, calls)
	}
}

func TestGoogleErrorsDoNotEchoToken(t *testing.T) {
	const token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"
	for _, verr := range []error{
		fmt.Errorf("idtoken: cannot parse %s", token),
		&url.Error{Op: "Get", URL: "https://example.com/?t=" + token, Err: timeoutError{}},
	} {
		validate := func(context.Context, string, string) (*idtoken.Payload, error) { return nil, verr }
		a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{"aud"}, Validate: validate})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Authenticate(request("Bearer " + token))
		if err == nil || strings.Contains(err.Error(), token) || !strings.Contains(err.Error(), "[REDACTED]") {
			t.Errorf("error %q echoes the token or lost the redaction", err)
		}
		if !errors.Is(err, verr) {
			t.Errorf("redacted error %v no longer wraps %v", err, verr)
		}
	}
}

func TestNewGoogleConfigErrors(t *testing.T) {
	validate := func(context.Context, string, string) (*idtoken.Payload, error) { return nil, nil }
	for _, cfg := range []GoogleConfig{
		{Audiences: []string{""}, Validate: validate},
		{Audiences: []string{"https://a", "https://b c"}, Validate: validate},
		{Validate: validate, ValidatorOptions: []idtoken.ClientOption{option.WithoutAuthentication()}},
	} {
		if a, err := NewGoogle(t.Context(), cfg); err == nil || a != nil {
			t.Errorf("NewGoogle(%+v) = %v, %v, want an error", cfg, a, err)
		} else if !strings.HasPrefix(err.Error(), "auth: GoogleConfig.") {
			t.Errorf("error %q does not name the field", err)
		}
	}
	// The caller's slice is copied.
	auds := []string{"https://a"}
	fake := &fakeValidator{tokens: map[string]*idtoken.Payload{}}
	a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: auds, Validate: fake.validate})
	if err != nil {
		t.Fatal(err)
	}
	auds[0] = "https://changed"
	a.Authenticate(request("Bearer x"))
	if len(fake.calls) != 1 || fake.calls[0] != "https://a" {
		t.Errorf("validated for %q, want [https://a]", fake.calls)
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// noNetwork fails the test if the validator makes any request.
func noNetwork(t *testing.T) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		t.Errorf("unexpected request to %s", r.URL)
		return nil, errors.New("no network in this test")
	})}
}

// TestGoogleRealValidatorRejectsMalformed uses the real idtoken validator.
// idtoken parses the token (three segments, JSON header and payload, then
// audience and expiry) before it fetches any certificate, so malformed,
// expired and wrong-audience tokens fail without network; the transport
// proves it.
func TestGoogleRealValidatorRejectsMalformed(t *testing.T) {
	const aud = "https://leases.example.com"
	a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{aud}, ValidatorOptions: []idtoken.ClientOption{option.WithHTTPClient(noNetwork(t))}})
	if err != nil {
		t.Fatal(err)
	}
	expired := signJWT(t, nil, "k", map[string]any{"aud": aud, "exp": time.Now().Add(-time.Hour).Unix(), "email": "a@b.c", "email_verified": true})
	wrongAud := signJWT(t, nil, "k", map[string]any{"aud": "https://other", "exp": time.Now().Add(time.Hour).Unix()})
	for _, token := range []string{"abc", "a.b.c", "e30.e30.", expired, wrongAud} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r := request("Bearer " + token).WithContext(ctx)
		_, err := a.Authenticate(r)
		cancel()
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(%.20q…) = %v, want ErrUnauthenticated", token, err)
		}
	}

	// And with the default options (a real HTTP client): "abc" is refused
	// before any network access, so this neither hangs nor needs network.
	d, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{aud}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := d.Authenticate(request("Bearer abc").WithContext(ctx)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Authenticate(abc) = %v, want ErrUnauthenticated", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Authenticate(abc) took %v: it must not wait for the network", el)
	}
}

// TestGoogleRealValidatorSignature runs the real validator's whole path with
// a generated key, served as Google's certificates by a fake transport.
func TestGoogleRealValidatorSignature(t *testing.T) {
	const aud = "https://leases.example.com"
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kid": "k1", "kty": "RSA", "alg": "RS256", "use": "sig",
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString([]byte{1, 0, 1}),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	certs := func(status int, transportErr error) *http.Client {
		return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.String() != "https://www.googleapis.com/oauth2/v3/certs" {
				return nil, fmt.Errorf("unexpected request to %s", r.URL)
			}
			if transportErr != nil {
				return nil, transportErr
			}
			return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(string(jwks))), Request: r}, nil
		})}
	}
	claims := map[string]any{"iss": "https://accounts.google.com", "aud": aud, "exp": time.Now().Add(time.Hour).Unix(), "email": "svc@p.iam.gserviceaccount.com", "email_verified": true}
	good := signJWT(t, key, "k1", claims)
	tampered := good[:strings.LastIndexByte(good, '.')] + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 256))
	otherKid := signJWT(t, key, "k2", claims)
	unverified := signJWT(t, key, "k1", map[string]any{"aud": aud, "exp": time.Now().Add(time.Hour).Unix(), "email": "x@y.z", "email_verified": false})

	tests := []struct {
		name      string
		client    *http.Client
		token     string
		principal string
		wantErr   error
	}{
		{"good", certs(http.StatusOK, nil), good, "svc@p.iam.gserviceaccount.com", nil},
		{"tampered signature", certs(http.StatusOK, nil), tampered, "", ErrUnauthenticated},
		{"unknown key id", certs(http.StatusOK, nil), otherKid, "", ErrUnauthenticated},
		{"unverified email", certs(http.StatusOK, nil), unverified, "", ErrUnauthenticated},
		{"certificates unreachable", certs(0, errors.New("dial tcp: connection refused")), good, "", ErrUnavailable},
		{"certificate endpoint failing", certs(http.StatusServiceUnavailable, nil), good, "", ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewGoogle(t.Context(), GoogleConfig{Audiences: []string{aud}, ValidatorOptions: []idtoken.ClientOption{option.WithHTTPClient(tt.client)}})
			if err != nil {
				t.Fatal(err)
			}
			principal, err := a.Authenticate(request("Bearer " + tt.token))
			if principal != tt.principal || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("Authenticate = %q, %v, want %q, %v", principal, err, tt.principal, tt.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tt.token) {
				t.Errorf("error %q echoes the token", err)
			}
		})
	}
}

// signJWT returns an RS256 JWT of claims signed by key with key id kid; a nil
// key gives a junk signature.
func signJWT(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signed := enc(map[string]string{"alg": "RS256", "kid": kid, "typ": "JWT"}) + "." + enc(claims)
	sig := []byte("junk")
	if key != nil {
		digest := sha256.Sum256([]byte(signed))
		var err error
		if sig, err = rsa.SignPKCS1v15(nil, key, crypto.SHA256, digest[:]); err != nil {
			t.Fatal(err)
		}
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig)
}
