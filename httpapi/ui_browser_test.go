package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// chromiumPath is Debian's chromium, which the browser test drives.
const chromiumPath = "/usr/bin/chromium"

// needTool fails the test under CI=true, and skips it elsewhere, with a
// message saying what to install.
func needTool(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// ensureChromium installs Debian's chromium when it is missing and the test
// runs as root.
func ensureChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err == nil {
		return
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("apt-get"); err == nil {
			apt := func(args ...string) error {
				cmd := exec.CommandContext(t.Context(), "apt-get", args...)
				cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Logf("apt-get %v: %v\n%s", args, err, tail(out))
				}
				return err
			}
			t.Log("installing chromium: apt-get install -y chromium")
			install := []string{"install", "-y", "--no-install-recommends", "chromium"}
			if apt(install...) == nil || (apt("update") == nil && apt(install...) == nil) {
				return
			}
		}
	}
	needTool(t, "the dashboard's browser test needs Debian's chromium at "+chromiumPath+": apt-get install -y chromium (as root)")
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// offsetClock is the backend clock of the browser test's open service: the
// wall time, plus whatever the test moved it forward by, so the test can lay
// out ten minutes of history in a second and then let time run.
type offsetClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *offsetClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *offsetClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// openDashboardService serves the API without authentication over a
// memory backend whose clock POST /test/advance?ms=N moves forward, and
// holds leases through sessions on POST /test/session (sessionRoute).
func openDashboardService(t *testing.T) *httptest.Server {
	t.Helper()
	clock := &offsetClock{}
	events := hub.New()
	m, err := lease.NewManager(memory.New(memory.WithClock(clock.now)), lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("POST /test/advance", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
		if err != nil || ms < 0 {
			http.Error(w, "ms", http.StatusBadRequest)
			return
		}
		clock.advance(time.Duration(ms) * time.Millisecond)
	})
	mux.HandleFunc("POST /test/session", sessionRoute(m))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		h.CloseStreams()
		srv.Close()
	})
	return srv
}

// sessionRoute answers POST /test/session?op=OP&name=N[&holder=H&windowMs=W]
// as the instance owning a session would act on the lease layer
// (docs/contract.md §14): op=acquire takes N for holder H through a new
// session of window W at the 30 s session lease TTL, op=renew renews it
// through that session, op=expire ends it as when the agent's heartbeats
// stopped (a released event, reason session_expired). It answers the
// lease's name, holder and token.
func sessionRoute(m *lease.Manager) http.HandlerFunc {
	const ttl = 30 * time.Second
	type held struct {
		ref    lease.SessionRef
		holder string
		token  int64
	}
	var mu sync.Mutex
	sessions := map[string]held{}
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		name := q.Get("name")
		mu.Lock()
		defer mu.Unlock()
		h, known := sessions[name]
		var l lease.Lease
		var err error
		switch op := q.Get("op"); {
		case op == "acquire":
			ms, perr := strconv.Atoi(q.Get("windowMs"))
			if perr != nil || ms < 200 {
				http.Error(w, "windowMs", http.StatusBadRequest)
				return
			}
			sum := sha256.Sum256([]byte("dashboard-test-session:" + name))
			h = held{ref: lease.SessionRef{Key: hex.EncodeToString(sum[:]), Epoch: 1, Window: time.Duration(ms) * time.Millisecond}, holder: q.Get("holder")}
			l, err = m.Acquire(r.Context(), lease.AcquireRequest{Name: name, Holder: h.holder, TTL: ttl, Session: &h.ref})
			h.token = l.FencingToken
			sessions[name] = h
		case !known:
			http.Error(w, "no session holds "+name, http.StatusNotFound)
			return
		case op == "renew":
			l, err = m.Renew(r.Context(), lease.RenewRequest{Name: name, Holder: h.holder, FencingToken: h.token, TTL: ttl, Session: &h.ref})
		case op == "expire":
			l, err = m.ExpireSession(r.Context(), lease.ReleaseRequest{Name: name, Holder: h.holder, FencingToken: h.token, Session: &h.ref})
			delete(sessions, name)
		default:
			http.Error(w, "op", http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"name":%q,"holder":%q,"fencingToken":%d}`, l.Name, l.Holder, l.FencingToken)
	}
}

// TestDashboardInBrowser drives /ui/ in headless chromium (playwright-core
// from npm, testdata/browser): the page lists the leases under a prefix
// with their recent terms, a new lease within 1 s of its acquire, the new
// holder within 1 s of a hand-over, a released lease as free; the time
// left counts down; a lease renewed every 0.6 s with a 2 s TTL stays led
// with time left through 60 s of samples every 200 ms (renewals are not
// events: the stream's refresh events bring them) and turns free within
// 1 s of its release; a waiting candidate (count, best priority, the yield
// it asks) and a transfer's successor are shown; a lease held through a
// session shows "session, window 1 s" (or "300 ms") and "while alive", not
// its backend record's 30 s countdown, and its end when the session dies as
// "session expired"; at 390 px nothing overflows; with authentication on the
// token field gates the page, the token stays in sessionStorage, and only
// readable leases are shown. Screenshots at 1280 and 390 px, light and
// dark, go to $LEASESVC_SCREENSHOT_DIR (default a new directory under the
// system temp dir, named in the log).
func TestDashboardInBrowser(t *testing.T) {
	ensureChromium(t)
	npm, err := exec.LookPath("npm")
	if err == nil {
		_, err = exec.LookPath("node")
	}
	if err != nil {
		needTool(t, "the dashboard's browser test needs node and npm (apt-get install -y nodejs npm)")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "browser"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			needTool(t, "npm ci in "+dir+" failed (the test needs npm and the npm registry): "+err.Error()+"\n"+string(tail(out)))
		}
	}
	shots := os.Getenv("LEASESVC_SCREENSHOT_DIR")
	if shots == "" {
		if shots, err = os.MkdirTemp("", "leasesvc-dashboard-"); err != nil {
			t.Fatal(err)
		}
	}
	open := openDashboardService(t)
	authed, _, _ := authServer(t, nil)

	cmd := exec.CommandContext(ctx, "node", "dashboard.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"OPEN_URL="+open.URL, "AUTH_URL="+authed.URL, "SHOTS="+shots, "CHROMIUM="+chromiumPath,
		"READ_TOKEN="+carolTok, "WRITE_A="+aliceTok, "WRITE_ALL="+flowTok)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("dashboard.mjs:\n%s", out.String())
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	for _, f := range []string{"dashboard-1280-light.png", "dashboard-1280-dark.png", "dashboard-390-light.png", "dashboard-390-dark.png"} {
		b, err := os.ReadFile(filepath.Join(shots, f))
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("screenshot %s: %v (%d bytes)", f, err, len(b))
		}
	}
	t.Logf("screenshots in %s", shots)
}
