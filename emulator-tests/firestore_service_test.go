package emulatortests

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// firestoreServiceEnv is the environment of a leasesvc process on the
// Firestore emulator, over a collection of its own.
func firestoreServiceEnv(t testing.TB) map[string]string {
	t.Helper()
	return map[string]string{
		"LEASESVC_BACKEND":              "firestore",
		"LEASESVC_PROJECT":              emulators.Project(),
		"LEASESVC_FIRESTORE_COLLECTION": uniqueCollection("svc"),
		emulators.FirestoreHostEnv:      emulators.Firestore(t),
	}
}

// TestFirestoreServiceFlows drives the real binary over HTTP on the
// Firestore backend through every lease flow.
func TestFirestoreServiceFlows(t *testing.T) {
	t.Parallel()
	svc := e2e.StartService(t, firestoreServiceEnv(t))
	c := e2e.Client{URL: svc.URL}
	if r := c.Get(t, "/readyz"); r.Status != http.StatusOK {
		t.Fatalf("/readyz = %d %s, want 200 with the emulator up", r.Status, r.Raw)
	}
	e2e.Flows(t, svc.URL)
}

// TestFirestoreServiceRestart stops the service (gracefully, then by a
// crash) and starts it again on the same collection: holdings survive and
// fencing tokens continue from where they were.
func TestFirestoreServiceRestart(t *testing.T) {
	t.Parallel()
	env := firestoreServiceEnv(t)
	svc := e2e.StartService(t, env)
	c := e2e.Client{URL: svc.URL}
	name := e2e.UniqueName("restart")
	p := "/v1/leases/" + name

	mustStatus(t, "acquire by a", c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), http.StatusOK)
	mustStatus(t, "release by a", c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), http.StatusOK)
	r := mustStatus(t, "acquire by b", c.Post(t, p+":acquire", `{"holder":"b","ttlMs":60000,"metadata":{"v":1}}`), http.StatusOK)
	if r.Token() != 2 {
		t.Fatalf("acquire by b = %s, want token 2", r.Raw)
	}
	before := r.Body

	svc.Restart() // SIGTERM, then the same binary on the same port
	r = mustStatus(t, "get after restart", c.Get(t, p), http.StatusOK)
	for _, k := range []string{"holder", "fencingToken", "acquireTime", "expireTime", "transitions"} {
		if r.Body[k] != before[k] {
			t.Fatalf("after restart %s = %v, want %v (body %s)", k, r.Body[k], before[k], r.Raw)
		}
	}
	if r.Body["held"] != true {
		t.Fatalf("after restart the lease is not held: %s", r.Raw)
	}
	r = mustStatus(t, "acquire by c while b holds", c.Post(t, p+":acquire", `{"holder":"c","ttlMs":60000}`), http.StatusConflict)
	if r.Code() != "lease_held" || r.Holder() != "b" {
		t.Fatalf("acquire by c = %s, want lease_held by b", r.Raw)
	}
	mustStatus(t, "renew by b after restart", c.Post(t, p+":renew", `{"holder":"b","fencingToken":2}`), http.StatusOK)

	svc.Kill() // a crash: no drain, no goodbye
	svc = e2e.StartService(t, env)
	c = e2e.Client{URL: svc.URL}
	r = mustStatus(t, "get after crash", c.Get(t, p), http.StatusOK)
	if r.Holder() != "b" || r.Token() != 2 || r.Body["held"] != true {
		t.Fatalf("after a crash the lease is %s, want held by b with token 2", r.Raw)
	}
	mustStatus(t, "release by b", c.Post(t, p+":release", `{"holder":"b","fencingToken":2}`), http.StatusOK)
	r = mustStatus(t, "acquire by c", c.Post(t, p+":acquire", `{"holder":"c","ttlMs":60000}`), http.StatusOK)
	if r.Token() != 3 || r.Body["transitions"] != 3.0 {
		t.Fatalf("acquire by c after restarts = %s, want token 3, transitions 3", r.Raw)
	}
	if _, err := svc.Stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, svc.Output())
	}
}

// TestFirestoreServiceConfig starts the binary with a bad Firestore
// configuration: it must exit at once, naming the variable to fix.
func TestFirestoreServiceConfig(t *testing.T) {
	t.Parallel()
	bin := e2e.Binary(t)
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no project", map[string]string{"LEASESVC_PROJECT": "", "GOOGLE_CLOUD_PROJECT": ""}, []string{"LEASESVC_PROJECT", "GOOGLE_CLOUD_PROJECT"}},
		{"bad database", map[string]string{"LEASESVC_PROJECT": emulators.Project(), "LEASESVC_FIRESTORE_DATABASE": "Bad_DB"}, []string{"LEASESVC_FIRESTORE_DATABASE"}},
		{"bad collection", map[string]string{"LEASESVC_PROJECT": emulators.Project(), "LEASESVC_FIRESTORE_COLLECTION": "a/b"}, []string{"LEASESVC_FIRESTORE_COLLECTION"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append(os.Environ(), "LEASESVC_BACKEND=firestore", "PORT=0", emulators.FirestoreHostEnv+"=127.0.0.1:1")
			for k, v := range tc.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("leasesvc = %v (ctx %v), want a prompt non-zero exit; output:\n%s", err, ctx.Err(), out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not name %s:\n%s", w, out)
				}
			}
		})
	}
}

// mustStatus fails the test unless r has the status.
func mustStatus(t *testing.T, step string, r e2e.Response, status int) e2e.Response {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s: status %d, want %d; body %s", step, r.Status, status, r.Raw)
	}
	return r
}
