package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/oauth2"

	"github.com/leasesvc/leasesvc/client"
)

// fakeService records each request and answers it with answer.
type fakeService struct {
	*httptest.Server
	answer http.HandlerFunc

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	Method, Path, Auth, ContentType string
	Body                            map[string]any
}

func newFake(t *testing.T, tls bool, answer http.HandlerFunc) *fakeService {
	t.Helper()
	f := &fakeService{answer: answer}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		f.mu.Lock()
		f.seen = append(f.seen, seenRequest{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Content-Type"), body})
		f.mu.Unlock()
		f.answer(w, r)
	})
	if tls {
		f.Server = httptest.NewTLSServer(h)
	} else {
		f.Server = httptest.NewServer(h)
	}
	t.Cleanup(f.Close)
	return f
}

func (f *fakeService) requests() []seenRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRequest(nil), f.seen...)
}

// answerLease answers every request with the lease JSON of body.
func answerLease(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// answerProblem answers every request with a problem of status and code.
func answerProblem(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if status == 401 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasesvc"`)
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "urn:leasesvc:problem:" + code, "status": status, "code": code, "detail": "test"})
	}
}

const heldLease = `{"name":"jobs.a","holder":"agent-a","fencingToken":3,"ttlMs":30000,"held":true,"remainingMs":20000,` +
	`"expireTime":"2026-11-21T18:00:30Z","serverTime":"2026-11-21T18:00:10Z","metadata":{}}`

// invocation is what one run of leasectl did.
type invocation struct {
	stdout, stderr string
	err            error
	code           int
}

// all is everything leasectl said, for checks that a token is never shown.
func (i invocation) all() string {
	s := i.stdout + i.stderr
	if i.err != nil {
		s += i.err.Error()
	}
	return s
}

// options of an invocation: the environment, the Google ID token maker
// (default: one that fails, as without Google credentials) and the HTTP
// client (for the TLS fake).
type options struct {
	vars     map[string]string
	idTokens func(ctx context.Context, audience string) (oauth2.TokenSource, error)
	hc       *http.Client
}

var errNoADC = errors.New("google: could not find default credentials")

func leasectl(t *testing.T, o options, args ...string) invocation {
	t.Helper()
	var out, errOut bytes.Buffer
	e := &env{getenv: func(k string) string { return o.vars[k] }, stdout: &out, stderr: &errOut, idTokens: o.idTokens, hc: o.hc}
	if e.idTokens == nil {
		e.idTokens = func(context.Context, string) (oauth2.TokenSource, error) { return nil, errNoADC }
	}
	err := e.run(t.Context(), args)
	inv := invocation{stdout: out.String(), stderr: errOut.String(), err: err}
	if err != nil {
		inv.code = exitCode(err)
	}
	return inv
}

// TestTokenFromFlagEnvAndFile: the bearer token comes from --token,
// --token-file, LEASESVC_TOKEN or LEASESVC_TOKEN_FILE, a flag before the
// environment; conflicting or unusable ones are usage errors that do not
// show the token; and no token is ever printed.
func TestTokenFromFlagEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokFile := file("tok", "\n  tok-from-file \n")
	envFile := file("envtok", "tok-from-env-file\n")
	empty := file("empty", " \n")
	spaced := file("spaced", "tok with-space\n")
	secrets := []string{"tok-from-flag", "tok-from-env", "tok-from-file", "tok-from-env-file", "tok with-space", "with-space"}

	for _, tc := range []struct {
		name     string
		args     []string
		vars     map[string]string
		wantAuth string // "" : none sent
		wantCode int
		wantErr  string
	}{
		{name: "none", wantAuth: ""},
		{name: "flag", args: []string{"--token", "tok-from-flag"}, wantAuth: "Bearer tok-from-flag"},
		{name: "env", vars: map[string]string{"LEASESVC_TOKEN": "tok-from-env"}, wantAuth: "Bearer tok-from-env"},
		{name: "file flag, trimmed", args: []string{"--token-file", tokFile}, wantAuth: "Bearer tok-from-file"},
		{name: "file env", vars: map[string]string{"LEASESVC_TOKEN_FILE": envFile}, wantAuth: "Bearer tok-from-env-file"},
		{name: "flag beats env", args: []string{"--token=tok-from-flag"}, vars: map[string]string{"LEASESVC_TOKEN": "tok-from-env"}, wantAuth: "Bearer tok-from-flag"},
		{name: "file flag beats env", args: []string{"--token-file", tokFile}, vars: map[string]string{"LEASESVC_TOKEN": "tok-from-env"}, wantAuth: "Bearer tok-from-file"},
		{name: "two flags", args: []string{"--token", "tok-from-flag", "--token-file", tokFile}, wantCode: exitUsage, wantErr: "give one of them"},
		{name: "two vars", vars: map[string]string{"LEASESVC_TOKEN": "tok-from-env", "LEASESVC_TOKEN_FILE": envFile}, wantCode: exitUsage, wantErr: "both set"},
		{name: "empty file", args: []string{"--token-file", empty}, wantCode: exitUsage, wantErr: "is empty"},
		{name: "missing file", args: []string{"--token-file", filepath.Join(dir, "nope")}, wantCode: exitUsage, wantErr: "no such file"},
		{name: "space inside", args: []string{"--token-file", spaced}, wantCode: exitUsage, wantErr: "has a space"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, false, answerLease(heldLease))
			vars := map[string]string{"LEASESVC_URL": f.URL}
			for k, v := range tc.vars {
				vars[k] = v
			}
			inv := leasectl(t, options{vars: vars}, append([]string{"get", "jobs.a"}, tc.args...)...)
			if inv.code != tc.wantCode || (tc.wantErr != "" && !strings.Contains(inv.all(), tc.wantErr)) {
				t.Fatalf("exit %d, %v; want %d saying %q", inv.code, inv.err, tc.wantCode, tc.wantErr)
			}
			reqs := f.requests()
			switch {
			case tc.wantCode != 0 && len(reqs) != 0:
				t.Fatalf("%d requests sent after a usage error", len(reqs))
			case tc.wantCode == 0 && (len(reqs) != 1 || reqs[0].Auth != tc.wantAuth):
				t.Fatalf("requests %+v, want one with Authorization %q", reqs, tc.wantAuth)
			}
			for _, s := range secrets {
				if strings.Contains(inv.all(), s) {
					t.Fatalf("leasectl printed the token %q:\n%s", s, inv.all())
				}
			}
		})
	}
	// The usage text shows neither the token of the environment nor a file's.
	inv := leasectl(t, options{vars: map[string]string{"LEASESVC_TOKEN": "tok-from-env", "LEASESVC_TOKEN_FILE": envFile}}, "get", "-h")
	if !strings.Contains(inv.stdout, "--token-file") || strings.Contains(inv.all(), "tok-from-env") {
		t.Fatalf("get -h printed:\n%s", inv.all())
	}
}

// TestGoogleIDTokens: without a static token an https URL gets Google ID
// tokens for its URL; when there are no Google credentials leasectl goes on
// without a token, and a 401 then says how to give one.
func TestGoogleIDTokens(t *testing.T) {
	f := newFake(t, true, answerLease(heldLease))
	var audiences []string
	idTokens := func(_ context.Context, aud string) (oauth2.TokenSource, error) {
		audiences = append(audiences, aud)
		return oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "google-id-token"}), nil
	}
	o := options{vars: map[string]string{"LEASESVC_URL": f.URL + "/"}, idTokens: idTokens, hc: f.Client()}
	if inv := leasectl(t, o, "get", "jobs.a"); inv.err != nil {
		t.Fatal(inv.err)
	}
	if r := f.requests(); len(r) != 1 || r[0].Auth != "Bearer google-id-token" || len(audiences) != 1 || audiences[0] != f.URL {
		t.Fatalf("requests %+v, audiences %q; want the ID token for %s", r, audiences, f.URL)
	}
	// A static token wins: no ID token is made.
	if inv := leasectl(t, o, "get", "jobs.a", "--token", "tok-from-flag"); inv.err != nil || len(audiences) != 1 {
		t.Fatalf("with --token: %v, %d ID token sources made", inv.err, len(audiences))
	}
	// Plain http: no ID tokens either.
	plain := newFake(t, false, answerLease(heldLease))
	if inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": plain.URL}, idTokens: idTokens}, "get", "jobs.a"); inv.err != nil ||
		len(audiences) != 1 || plain.requests()[0].Auth != "" {
		t.Fatalf("http URL: %v, %d ID token sources made, Authorization %q", inv.err, len(audiences), plain.requests()[0].Auth)
	}

	// No Google credentials, and the service wants some.
	f.answer = answerProblem(401, "unauthenticated")
	inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL}, hc: f.Client()}, "get", "jobs.a")
	if inv.code != exitDenied || !errors.Is(inv.err, client.ErrUnauthenticated) {
		t.Fatalf("401 without credentials: exit %d, %v; want %d", inv.code, inv.err, exitDenied)
	}
	for _, want := range []string{"--token", "LEASESVC_TOKEN", "gcloud auth print-identity-token", "no Google ID token either: " + errNoADC.Error()} {
		if !strings.Contains(inv.err.Error(), want) {
			t.Errorf("the error says\n%v\nwith no %q", inv.err, want)
		}
	}
	if r := f.requests(); r[len(r)-1].Auth != "" {
		t.Fatalf("sent Authorization %q without credentials", r[len(r)-1].Auth)
	}
	// Cloud Run answers 403 to a request without a token: the same hint.
	f.answer = answerProblem(403, "permission_denied")
	if inv := leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL}, hc: f.Client()}, "get", "jobs.a"); inv.code != exitDenied ||
		!strings.Contains(inv.err.Error(), "gcloud auth print-identity-token") {
		t.Fatalf("403 without credentials: exit %d, %v", inv.code, inv.err)
	}
	// A token that was refused: the hint names where it came from, not it.
	f.answer = answerProblem(401, "unauthenticated")
	inv = leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL, "LEASESVC_TOKEN": "tok-from-env"}, hc: f.Client()}, "get", "jobs.a")
	if inv.code != exitDenied || !strings.Contains(inv.err.Error(), "refused the token of LEASESVC_TOKEN") || strings.Contains(inv.all(), "tok-from-env") {
		t.Fatalf("refused token: exit %d, %v", inv.code, inv.err)
	}
	// A Google ID token that was refused.
	inv = leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL}, idTokens: idTokens, hc: f.Client()}, "get", "jobs.a")
	if inv.code != exitDenied || !strings.Contains(inv.err.Error(), "refused the Google ID token") || strings.Contains(inv.all(), "google-id-token") {
		t.Fatalf("refused ID token: exit %d, %v", inv.code, inv.err)
	}
	// A token source that fails: exit 7 too, and nothing sent.
	n := len(f.requests())
	failing := func(context.Context, string) (oauth2.TokenSource, error) { return failingSource{}, nil }
	inv = leasectl(t, options{vars: map[string]string{"LEASESVC_URL": f.URL}, idTokens: failing, hc: f.Client()}, "get", "jobs.a")
	if inv.code != exitDenied || !errors.Is(inv.err, client.ErrCredentials) || len(f.requests()) != n ||
		!strings.Contains(inv.err.Error(), "gcloud auth print-identity-token") {
		t.Fatalf("failing token source: exit %d, %v, %d requests sent", inv.code, inv.err, len(f.requests())-n)
	}
}

type failingSource struct{}

func (failingSource) Token() (*oauth2.Token, error) {
	return nil, errors.New("metadata server: 500")
}

// TestOldTokenFlag: renew and release take --fencing-token; the --token of
// older versions is the credential now, and leaving out --fencing-token
// says so.
func TestOldTokenFlag(t *testing.T) {
	f := newFake(t, false, answerLease(heldLease))
	vars := map[string]string{"LEASESVC_URL": f.URL}
	for _, cmd := range []string{"renew", "release"} {
		inv := leasectl(t, options{vars: vars}, cmd, "jobs.a", "--holder", "agent-a", "--token", "3")
		if inv.code != exitUsage || !strings.Contains(inv.err.Error(), "the fencing token is --fencing-token") || len(f.requests()) != 0 {
			t.Fatalf("%s --token 3: exit %d, %v", cmd, inv.code, inv.err)
		}
	}
	inv := leasectl(t, options{vars: vars}, "renew", "jobs.a", "--holder", "agent-a", "--fencing-token", "3", "--token", "tok-from-flag")
	if r := f.requests(); inv.err != nil || len(r) != 1 || r[0].Auth != "Bearer tok-from-flag" || r[0].Body["fencingToken"] != 3.0 {
		t.Fatalf("renew: %v, requests %+v", inv.err, r)
	}
}
