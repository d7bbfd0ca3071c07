package httpapi_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/lease"
)

// sourceServer serves the API without authentication, with cfg.
func sourceServer(t *testing.T, cfg httpapi.Config) *httptest.Server {
	t.Helper()
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := httpapi.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// send sends one request with the given Host (empty: the server's address),
// Content-Type and Origin (empty: none).
func send(t *testing.T, srv *httptest.Server, method, path, host, contentType, origin, body string) e2e.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	out := e2e.Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	if c := strings.Index(out.Raw, `"code":"`); c >= 0 {
		code := out.Raw[c+len(`"code":"`):]
		out.Body = map[string]any{"code": code[:strings.IndexByte(code, '"')]}
	}
	return out
}

// TestStateChangesNeedJSONContentType: what an HTML form or a no-cors
// fetch can send (no Content-Type, text/plain, a form) changes nothing.
func TestStateChangesNeedJSONContentType(t *testing.T) {
	srv := sourceServer(t, httpapi.Config{})
	body := `{"holder":"h","ttlMs":30000}`
	for _, ct := range []string{"", "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		if r := send(t, srv, "POST", "/v1/leases/csrf:acquire", "", ct, "", body); r.Status != 415 || r.Code() != "unsupported_media_type" {
			t.Errorf("acquire with Content-Type %q = %d %s, want 415 unsupported_media_type", ct, r.Status, r.Raw)
		}
	}
	for _, verb := range []string{"renew", "release", "transfer", "revoke"} {
		if r := send(t, srv, "POST", "/v1/leases/csrf:"+verb, "", "", "", `{}`); r.Status != 415 {
			t.Errorf("%s without Content-Type = %d %s, want 415", verb, r.Status, r.Raw)
		}
	}
	if r := send(t, srv, "GET", "/v1/leases/csrf", "", "", "", ""); r.Status != 404 {
		t.Fatalf("after the refused acquires the lease = %d %s, want 404 (never created)", r.Status, r.Raw)
	}
	if r := send(t, srv, "POST", "/v1/leases/csrf:acquire", "", "application/json; charset=utf-8", "", body); r.Status != 200 {
		t.Fatalf("acquire with application/json = %d %s", r.Status, r.Raw)
	}
}

// TestCrossOriginRequestsRefused: a request whose Origin is another site's
// is 403 origin_not_allowed on every API route, reads included, and
// changes nothing; the service's own origin and configured ones pass.
func TestCrossOriginRequestsRefused(t *testing.T) {
	srv := sourceServer(t, httpapi.Config{AllowedOrigins: []string{"https://tools.example.com"}})
	self := strings.Replace(srv.URL, "http://", "https://", 1) // TLS may end in front of the service
	body := `{"holder":"h","ttlMs":30000}`
	for _, origin := range []string{"http://evil.example", "http://localhost:3000", "null", "http://127.0.0.1", "https://tools.example.com:8443", "not a url"} {
		for _, rq := range []struct{ method, path, body string }{
			{"POST", "/v1/leases/xo:acquire", body},
			{"POST", "/v1/leases/xo:revoke", `{"reason":"x"}`},
			{"GET", "/v1/leases/xo", ""},
			{"GET", "/v1/leases", ""},
			{"GET", "/v1/leases:watch", ""},
		} {
			if r := send(t, srv, rq.method, rq.path, "", "application/json", origin, rq.body); r.Status != 403 || r.Code() != "origin_not_allowed" {
				t.Errorf("%s %s from Origin %q = %d %s, want 403 origin_not_allowed", rq.method, rq.path, origin, r.Status, r.Raw)
			}
		}
	}
	if r := send(t, srv, "GET", "/v1/leases/xo", "", "", "", ""); r.Status != 404 {
		t.Fatalf("after the refused requests the lease = %d %s, want 404 (never created)", r.Status, r.Raw)
	}
	for _, origin := range []string{srv.URL, self, "https://tools.example.com", "HTTPS://Tools.Example.com:443"} {
		if r := send(t, srv, "POST", "/v1/leases/xo:acquire", "", "application/json", origin, body); r.Status != 200 {
			t.Errorf("acquire from Origin %q = %d %s, want 200", origin, r.Status, r.Raw)
		}
	}
	if r := send(t, srv, "GET", "/healthz", "", "", "http://evil.example", ""); r.Status != 200 {
		t.Errorf("/healthz from another origin = %d, want 200 (probes are open to all)", r.Status)
	}
}

// TestHostCheckedWithoutAuth: with authentication off, only requests
// addressed to a loopback name or a configured host are served, so that a
// name an attacker points at 127.0.0.1 (DNS rebinding) reaches nothing.
func TestHostCheckedWithoutAuth(t *testing.T) {
	srv := sourceServer(t, httpapi.Config{AllowedHosts: []string{"leasesvc.internal"}})
	for _, host := range []string{"localhost", "localhost:8080", "LOCALHOST.", "dash.localhost:9", "127.0.0.1", "127.1.2.3:80", "[::1]:8080", "[::1]", "leasesvc.internal:8080"} {
		if r := send(t, srv, "GET", "/v1/leases", host, "", "", ""); r.Status != 200 {
			t.Errorf("list with Host %q = %d %s, want 200", host, r.Status, r.Raw)
		}
	}
	for _, host := range []string{"attacker.example", "attacker.example:8080", "localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.1", "[::2]", "leasesvc.internal.evil"} {
		for _, rq := range []struct{ method, path, body string }{
			{"POST", "/v1/leases/rebind:acquire", `{"holder":"h","ttlMs":30000}`},
			{"GET", "/v1/leases", ""},
			{"GET", "/v1/leases/rebind:watch", ""},
		} {
			if r := send(t, srv, rq.method, rq.path, host, "application/json", "", rq.body); r.Status != 403 || r.Code() != "host_not_allowed" {
				t.Errorf("%s %s with Host %q = %d %s, want 403 host_not_allowed", rq.method, rq.path, host, r.Status, r.Raw)
			}
		}
	}
	if r := send(t, srv, "GET", "/v1/leases/rebind", "", "", "", ""); r.Status != 404 {
		t.Fatalf("after the refused requests the lease = %d %s, want 404", r.Status, r.Raw)
	}
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json", "/ui/"} {
		if r := send(t, srv, "GET", path, "attacker.example", "", "", ""); r.Status != 200 {
			t.Errorf("GET %s with Host attacker.example = %d, want 200 (it shows no lease)", path, r.Status)
		}
	}
	anyHost := sourceServer(t, httpapi.Config{AllowedHosts: []string{"*"}})
	if r := send(t, anyHost, "GET", "/v1/leases", "attacker.example", "", "", ""); r.Status != 200 {
		t.Errorf("with AllowedHosts * a list with Host attacker.example = %d %s, want 200", r.Status, r.Raw)
	}
}

// TestHostNotCheckedWithAuth: with authentication on, any Host reaches the
// credentials check (a rebound page has no token to send).
func TestHostNotCheckedWithAuth(t *testing.T) {
	authn, err := auth.ParseStatic([]byte(testTokens), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := sourceServer(t, httpapi.Config{Authenticator: authn})
	if r := send(t, srv, "GET", "/v1/leases", "leasesvc-abc.a.run.app", "", "", ""); r.Status != 401 {
		t.Errorf("list without credentials, Host of a Cloud Run URL = %d %s, want 401", r.Status, r.Raw)
	}
}

// TestNewChecksAllowedSources: a malformed origin or host is a
// configuration error naming the field.
func TestNewChecksAllowedSources(t *testing.T) {
	m, _ := lease.NewManager(memory.New(), lease.Config{})
	for _, cfg := range []httpapi.Config{
		{AllowedOrigins: []string{"tools.example.com"}},
		{AllowedOrigins: []string{"https://tools.example.com/app"}},
		{AllowedOrigins: []string{"ftp://tools.example.com"}},
		{AllowedHosts: []string{"http://leasesvc.internal"}},
		{AllowedHosts: []string{"leasesvc.internal:8080"}},
		{AllowedHosts: []string{""}},
	} {
		if _, err := httpapi.New(m, cfg); err == nil || !strings.Contains(err.Error(), "Config.Allowed") {
			t.Errorf("New(%+v) = %v, want an error naming the field", cfg, err)
		}
	}
}
