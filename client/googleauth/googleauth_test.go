package googleauth_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/googleauth"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// idToken is an unsigned JWT that expires in an hour: what the fake token
// endpoint hands out (the client never checks its signature; the service
// does).
func idToken(t *testing.T, aud string) string {
	t.Helper()
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." +
		enc(map[string]any{"aud": aud, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}) + ".c2ln"
}

// TestIDTokenSourceWithServiceAccountKey: with a service-account key in
// GOOGLE_APPLICATION_CREDENTIALS, the source trades a JWT signed by the key
// for an ID token whose target audience is the service URL, and the Client
// sends that ID token as its bearer token.
func TestIDTokenSourceWithServiceAccountKey(t *testing.T) {
	const audience = "https://leasesvc-abc123-uc.a.run.app"
	want := idToken(t, audience)
	var trades atomic.Int32
	tokenEndpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		trades.Add(1)
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		// The assertion's claims carry the audience asked for.
		parts := strings.Split(r.PostForm.Get("assertion"), ".")
		claims, _ := base64.RawURLEncoding.DecodeString(parts[min(1, len(parts)-1)])
		var c struct {
			TargetAudience string `json:"target_audience"`
		}
		if json.Unmarshal(claims, &c) != nil || c.TargetAudience != audience {
			http.Error(w, "target_audience "+c.TargetAudience, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id_token": want})
	}))
	defer tokenEndpoint.Close()

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: must(x509.MarshalPKCS8PrivateKey(key))})
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1", "private_key": string(pemKey),
		"client_email": "agent@p.iam.gserviceaccount.com", "client_id": "1", "token_uri": tokenEndpoint.URL,
	})
	file := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(file, sa, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)

	ts, err := googleauth.IDTokenSource(t.Context(), audience+"/")
	if err != nil {
		t.Fatalf("IDTokenSource: %v", err)
	}
	svc, got := leaseService(t)
	c, err := client.New(svc.URL, client.Config{TokenSource: ts})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Get(t.Context(), "jobs"); err != nil {
			t.Fatal(err)
		}
		if got.Load() != "Bearer "+want {
			t.Fatalf("Authorization %q, want the ID token as bearer", got.Load())
		}
	}
	if n := trades.Load(); n != 1 {
		t.Fatalf("%d token trades for 3 calls, want 1 (the token is cached until it expires)", n)
	}
}

func TestIDTokenSourceFails(t *testing.T) {
	if _, err := googleauth.IDTokenSource(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Fatalf("empty audience: %v", err)
	}
	// User credentials cannot mint ID tokens for an audience.
	file := filepath.Join(t.TempDir(), "adc.json")
	user := `{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`
	if err := os.WriteFile(file, []byte(user), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	_, err := googleauth.IDTokenSource(t.Context(), "https://svc.example")
	if err == nil || errors.Is(err, client.ErrCredentials) || !strings.HasPrefix(err.Error(), "googleauth.IDTokenSource: ") {
		t.Fatalf("user credentials: %v, want an error of IDTokenSource", err)
	}
	t.Logf("user credentials: %v", err)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestNewClient: NewClient keeps a TokenSource given in the Config (a
// static token for local runs) and otherwise fails, saying why, when
// Application Default Credentials cannot mint ID tokens.
func TestNewClient(t *testing.T) {
	svc, got := leaseService(t)
	c, err := googleauth.NewClient(t.Context(), svc.URL, client.Config{TokenSource: client.StaticToken("local-token-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(t.Context(), "jobs"); err != nil || got.Load() != "Bearer local-token-0123456789" {
		t.Fatalf("Get = %v with Authorization %q, want the given static token", err, got.Load())
	}

	file := filepath.Join(t.TempDir(), "adc.json")
	if err := os.WriteFile(file, []byte(`{"type":"authorized_user","client_id":"c","client_secret":"s","refresh_token":"r"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	if _, err := googleauth.NewClient(t.Context(), svc.URL, client.Config{}); err == nil || !strings.HasPrefix(err.Error(), "googleauth.NewClient: googleauth.IDTokenSource: ") {
		t.Fatalf("NewClient with user credentials = %v, want the ID-token error", err)
	}
	if _, err := googleauth.NewClient(t.Context(), "ftp://x", client.Config{TokenSource: client.StaticToken("local-token-0123456789")}); err == nil {
		t.Fatal("NewClient accepted an ftp URL")
	}
}

// leaseService is a stand-in for leasesvc that answers every request with
// lease "jobs" and records the Authorization header it was sent.
func leaseService(t *testing.T) (*httptest.Server, *atomic.Value) {
	t.Helper()
	got := new(atomic.Value)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"name":"jobs","holder":"a","fencingToken":1,"held":true}`))
	}))
	t.Cleanup(svc.Close)
	return svc, got
}
