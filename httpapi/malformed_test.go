package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/idtoken"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/lease"
)

// Malformed input at the edges of a request: Authorization headers with
// control characters or folded lines, an authenticator that panics, and
// integers in the query that are not plain decimal digits.

const malformedTok = "alice-token-0123456789"

// malformedServer serves the API with authn (static alice@example.com with
// malformedTok when nil) and a policy granting her acquire on team-a.; its
// log (audit lines included) goes to the returned buffer.
func malformedServer(t *testing.T, authn auth.Authenticator) (http.Handler, *e2e.SyncBuffer) {
	t.Helper()
	if authn == nil {
		var err error
		authn, err = auth.ParseStatic([]byte("tokens:\n  - {principal: alice@example.com, token: "+malformedTok+"}\n"), "tokens.yaml")
		if err != nil {
			t.Fatal(err)
		}
	}
	policy, err := auth.ParsePolicy([]byte("grants:\n  - principals: [alice@example.com]\n    verbs: [acquire]\n    prefixes: [team-a.]\n"), "policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	logs := &e2e.SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(m, Config{Logger: log, Authenticator: authn, Policy: policy, Audit: audit.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	return h, logs
}

// problemOf decodes a problem+json answer.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder) (code, detail string) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, rec.Body)
	}
	var p struct{ Code, Detail string }
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p.Code, p.Detail
}

// TestAuthHeaderControlCharacters: an Authorization value with a control
// character (what obsolete line folding leaves when nothing unfolds it, a
// tab, NUL, DEL) is refused at the handler, whatever its token, with 401, a
// detail that says why and an audit line.
func TestAuthHeaderControlCharacters(t *testing.T) {
	h, logs := malformedServer(t, nil)
	for _, v := range []string{
		"Bearer\t" + malformedTok,
		"Bearer\r\n " + malformedTok,
		"Bearer " + malformedTok + "\r\n x",
		"Bearer " + malformedTok + "\n",
		"Bearer " + malformedTok + "\x00",
		"Bearer " + malformedTok[:5] + "\x7f" + malformedTok[5:],
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/leases/team-a.x", nil)
		r.Header["Authorization"] = []string{v}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusUnauthorized || rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: %d %s, want 401 with WWW-Authenticate", v, rec.Code, rec.Body)
			continue
		}
		if code, detail := problemOf(t, rec); code != "unauthenticated" || !strings.Contains(detail, "control character") {
			t.Errorf("Authorization %q: problem %s %q, want unauthenticated saying why", v, code, detail)
		}
	}
	if n := strings.Count(logs.String(), `"outcome":"unauthenticated"`); n != 6 || !strings.Contains(logs.String(), "control character U+0009") {
		t.Errorf("%d audit lines of unauthenticated, want 6 naming the character:\n%s", n, logs)
	}
	if strings.Contains(logs.String(), malformedTok) {
		t.Error("the log contains the token")
	}
	// The same token, sent properly, is alice's: team-a.x does not exist.
	r := httptest.NewRequest(http.MethodGet, "/v1/leases/team-a.x", nil)
	r.Header.Set("Authorization", "Bearer "+malformedTok)
	rec := httptest.NewRecorder()
	if h.ServeHTTP(rec, r); rec.Code != http.StatusNotFound {
		t.Errorf("a proper header: %d %s, want 404", rec.Code, rec.Body)
	}
}

// rawRequest sends head (the request line and headers, each ending in
// "\r\n") to srv over TCP and returns the status and body of the answer.
func rawRequest(t *testing.T, srv *httptest.Server, head string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, head+"Connection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestAuthHeaderOverTCP shows what of a folded or control-laden
// Authorization header reaches the handler through net/http's server.
// net/http unfolds obs-fold into one space (RFC 7230 §3.2.4 lets a server
// do that instead of answering 400): folded between the scheme and the
// token, the header is exactly "Bearer <token>", a proper one, and is
// accepted; folded anywhere else the space it leaves is refused. A tab
// reaches the handler (401, control character); CR, NUL and other controls
// are refused by net/http with a plain 400 before the handler runs.
func TestAuthHeaderOverTCP(t *testing.T) {
	h, logs := malformedServer(t, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	const get = "GET /v1/leases/team-a.x HTTP/1.1\r\nHost: leases.example.com\r\n"
	tests := []struct {
		name   string
		header string
		status []int  // accepted answers
		detail string // in the body of a 401
	}{
		{"proper", "Authorization: Bearer " + malformedTok + "\r\n", []int{404}, ""},
		// Unfolded to "Bearer <token>": the credential that was sent. A
		// later Go that refuses obs-fold would answer 400.
		{"folded before the token", "Authorization: Bearer\r\n " + malformedTok + "\r\n", []int{404, 400}, ""},
		{"folded before the scheme", "Authorization:\r\n\tBearer " + malformedTok + "\r\n", []int{404, 400}, ""},
		{"folded inside the token", "Authorization: Bearer " + malformedTok[:5] + "\r\n " + malformedTok[5:] + "\r\n", []int{401, 400}, "Bearer <token>"},
		{"folded after the token", "Authorization: Bearer " + malformedTok + "\r\n \r\n", []int{401, 400}, "Bearer <token>"},
		{"tab", "Authorization: Bearer\t" + malformedTok + "\r\n", []int{401}, "control character"},
		{"carriage return", "Authorization: Bearer " + malformedTok + "\rx\r\n", []int{400}, ""},
		{"NUL", "Authorization: Bearer " + malformedTok + "\x00\r\n", []int{400}, ""},
		{"DEL", "Authorization: Bearer " + malformedTok + "\x7f\r\n", []int{400}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := rawRequest(t, srv, get+tt.header)
			ok := false
			for _, s := range tt.status {
				ok = ok || s == status
			}
			if !ok {
				t.Fatalf("%d %s, want one of %v", status, body, tt.status)
			}
			if status == 401 && !strings.Contains(body, tt.detail) {
				t.Errorf("401 %s does not say %q", body, tt.detail)
			}
		})
	}
	if strings.Contains(logs.String(), malformedTok) {
		t.Error("the log contains the token")
	}
}

// TestAuthValidatorPanicIs401: a Google ID token validator that panics on a
// token (as idtoken v0.309.0 did on an ES256 token with a short signature)
// gets the request a 401 problem and an audit line, not a dropped
// connection.
func TestAuthValidatorPanicIs401(t *testing.T) {
	validate := func(_ context.Context, token, _ string) (*idtoken.Payload, error) {
		var sig []byte
		_ = sig[:len(token)] // out of range
		return nil, nil
	}
	authn, err := auth.NewGoogle(t.Context(), auth.GoogleConfig{Audiences: []string{"https://leases.example.com"}, Validate: validate})
	if err != nil {
		t.Fatal(err)
	}
	h, logs := malformedServer(t, authn)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	r := e2e.Client{URL: srv.URL, Token: "eyJhbGciOiJFUzI1NiJ9.e30.AA"}.Get(t, "/v1/leases/team-a.x")
	if r.Status != 401 || r.Code() != "unauthenticated" || r.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%d %s, want a 401 unauthenticated problem", r.Status, r.Raw)
	}
	if !strings.Contains(logs.String(), `"outcome":"unauthenticated"`) || !strings.Contains(logs.String(), "recovered panic") {
		t.Errorf("no audit line of the refusal naming the panic:\n%s", logs)
	}
}

// TestPageSizeDigitsOnly: list's pageSize is decimal digits only; a sign
// ("%2B5" is "+5", which strconv.Atoi reads as 5), spaces and other forms
// are 400 invalid_argument naming pageSize.
func TestPageSizeDigitsOnly(t *testing.T) {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: fmt.Sprintf("p.%d", i), Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := New(m, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := e2e.Client{URL: srv.URL}
	for _, raw := range []string{"%2B5", "%2B0", "-0", "-1", "+5", "5%20", "%205", "0x5", "5_0", "1e3", "5.0", url.QueryEscape("٥"), "", "abc"} {
		r := c.Get(t, "/v1/leases?prefix=p.&pageSize="+raw)
		if r.Status != 400 || r.Code() != "invalid_argument" || !strings.Contains(r.Raw, `"field":"pageSize"`) {
			t.Errorf("pageSize=%s: %d %.200s, want 400 invalid_argument naming pageSize", raw, r.Status, r.Raw)
		}
	}
	for raw, want := range map[string]int{"5": 5, "05": 5, "0": 7, "1": 1, "1000": 7, "5000": 7} {
		r := c.Get(t, "/v1/leases?prefix=p.&pageSize="+raw)
		if got, _ := r.Body["leases"].([]any); r.Status != 200 || len(got) != want {
			t.Errorf("pageSize=%s: %d with %d leases, want 200 with %d: %.200s", raw, r.Status, len(got), want, r.Raw)
		}
	}
}

// TestQueryDecimal checks decimal and pageSizeParam on their own.
func TestQueryDecimal(t *testing.T) {
	for s, want := range map[string]int64{
		"0": 0, "7": 7, "007": 7, "1000": 1000,
		"9223372036854775807":  math.MaxInt64,
		"9223372036854775808":  math.MaxInt64, // saturated
		"99999999999999999999": math.MaxInt64,
	} {
		if n, ok := decimal(s); !ok || n != want {
			t.Errorf("decimal(%q) = %d, %v, want %d", s, n, ok, want)
		}
	}
	for _, s := range []string{"", "+5", "-0", "-1", " 5", "5 ", "5\n", "0x5", "5_0", "1e3", "٥", "99999999999999999999x"} {
		if n, ok := decimal(s); ok {
			t.Errorf("decimal(%q) = %d, true, want false", s, n)
		}
	}
	for q, want := range map[string]int{"": lease.DefaultPageSize, "pageSize=0": lease.DefaultPageSize, "pageSize=3": 3,
		"pageSize=1001": lease.MaxPageSize, "pageSize=99999999999999999999": lease.MaxPageSize} {
		v, _ := url.ParseQuery(q)
		if n, p := pageSizeParam(v); p != nil || n != want {
			t.Errorf("pageSizeParam(%q) = %d, %v, want %d", q, n, p, want)
		}
	}
}
