package emulatortests

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// spannerServiceEnv is the environment of a leasesvc over database db.
// SPANNER_EMULATOR_HOST reaches the binary through the test process's
// environment, where emulators.Spanner set it.
func spannerServiceEnv(db string, extra ...string) map[string]string {
	env := map[string]string{"LEASESVC_BACKEND": "spanner", "LEASESVC_SPANNER_DATABASE": db}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// stopCleanly stops svc and fails the test unless it exited cleanly.
func stopCleanly(t *testing.T, svc *e2e.Service) {
	t.Helper()
	if _, err := svc.Stop(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, svc.Output())
	}
	if out := svc.Output(); strings.Contains(out, `"severity":"ERROR"`) {
		t.Fatalf("leasesvc logged an error:\n%s", out)
	}
}

// TestSpannerServiceOverHTTP drives the real binary over the Spanner
// emulator through the lease flows and every malformed input of docs/contract.md §4.
func TestSpannerServiceOverHTTP(t *testing.T) {
	db, _ := spannerSetup(t)
	svc := e2e.StartService(t, spannerServiceEnv(db))
	e2e.Flows(t, svc.URL)
	stopCleanly(t, svc)
}

// TestSpannerServiceRestart creates the table through
// LEASESVC_SPANNER_MIGRATE=true on a fresh database, then restarts the
// binary twice, after a graceful stop and after SIGKILL (the second time
// without migrate): fencing tokens continue where they were and a holding
// survives the restarts.
func TestSpannerServiceRestart(t *testing.T) {
	db, _ := spannerScratchDatabase(t)
	svc := e2e.StartService(t, spannerServiceEnv(db, "LEASESVC_SPANNER_MIGRATE", "true"))
	c := e2e.Client{URL: svc.URL}
	turns, kept := e2e.UniqueName("turns"), e2e.UniqueName("kept")

	r := c.Post(t, "/v1/leases/"+turns+":acquire", `{"holder":"a","ttlMs":60000}`)
	if r.Status != http.StatusOK || r.Token() != 1 {
		t.Fatalf("acquire: %d %s, want 200 with token 1", r.Status, r.Raw)
	}
	if r = c.Post(t, "/v1/leases/"+turns+":release", `{"holder":"a","fencingToken":1}`); r.Status != http.StatusOK {
		t.Fatalf("release: %d %s", r.Status, r.Raw)
	}
	r = c.Post(t, "/v1/leases/"+kept+":acquire", `{"holder":"keeper","ttlMs":120000,"metadata":{"z":1,"a":[2.50]}}`)
	if r.Status != http.StatusOK {
		t.Fatalf("acquire %s: %d %s", kept, r.Status, r.Raw)
	}
	expire := r.Body["expireTime"]
	stopCleanly(t, svc)

	for i, env := range []map[string]string{
		spannerServiceEnv(db, "LEASESVC_SPANNER_MIGRATE", "true"), // the table exists: migrate changes nothing
		spannerServiceEnv(db),
	} {
		svc = e2e.StartService(t, env)
		c = e2e.Client{URL: svc.URL}
		r = c.Post(t, "/v1/leases/"+kept+":acquire", `{"holder":"other","ttlMs":60000}`)
		if r.Status != http.StatusConflict || r.Code() != "lease_held" || r.Holder() != "keeper" || r.Token() != 1 ||
			r.Lease()["expireTime"] != expire {
			t.Fatalf("restart %d: acquire of the kept lease by another = %d %s; want lease_held by keeper, token 1, expireTime %v",
				i+1, r.Status, r.Raw, expire)
		}
		if md, _ := r.Lease()["metadata"].(map[string]any); md == nil || md["z"] != 1.0 {
			t.Fatalf("restart %d: metadata lost: %s", i+1, r.Raw)
		}
		r = c.Post(t, "/v1/leases/"+kept+":renew", `{"holder":"keeper","fencingToken":1}`)
		if r.Status != http.StatusOK || r.Token() != 1 {
			t.Fatalf("restart %d: renew by the keeper = %d %s, want 200 with token 1", i+1, r.Status, r.Raw)
		}
		expire = r.Body["expireTime"]
		r = c.Post(t, "/v1/leases/"+turns+":acquire", `{"holder":"b","ttlMs":60000}`)
		if want := int64(i + 2); r.Status != http.StatusOK || r.Token() != want {
			t.Fatalf("restart %d: acquire after release = %d %s, want token %d", i+1, r.Status, r.Raw, want)
		}
		if r = c.Post(t, "/v1/leases/"+turns+":release", `{"holder":"b","fencingToken":`+strconv.FormatInt(r.Token(), 10)+`}`); r.Status != http.StatusOK {
			t.Fatalf("restart %d: release: %d %s", i+1, r.Status, r.Raw)
		}
		if i == 0 {
			svc.Kill() // the next start follows a crash
			continue
		}
		stopCleanly(t, svc)
	}
}

// TestSpannerServiceConfigErrors starts the binary with bad Spanner
// settings: each stops start-up with a message that names the setting.
func TestSpannerServiceConfigErrors(t *testing.T) {
	db, _ := spannerSetup(t)
	empty, _ := spannerScratchDatabase(t)
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no database", map[string]string{"LEASESVC_BACKEND": "spanner"}, []string{"LEASESVC_SPANNER_DATABASE is required"}},
		{"malformed database", spannerServiceEnv("projects/p/databases/d"), []string{"LEASESVC_SPANNER_DATABASE=", "projects/PROJECT/instances/INSTANCE/databases/DATABASE"}},
		{"migrate not a bool", spannerServiceEnv(db, "LEASESVC_SPANNER_MIGRATE", "yes please"), []string{"LEASESVC_SPANNER_MIGRATE=", "true or false"}},
		{"fast path unknown", spannerServiceEnv(db, "LEASESVC_SPANNER_FAST_PATH", "true"), []string{"LEASESVC_SPANNER_FAST_PATH=", "adaptive, always or never"}},
		{"short instance ID", spannerServiceEnv("projects/leasesvc-test/instances/i/databases/leases"), []string{"LEASESVC_SPANNER_DATABASE=", `instance ID "i" is too short`}},
		{"unreachable", spannerServiceEnv(db, "SPANNER_EMULATOR_HOST", "127.0.0.1:1"), []string{"127.0.0.1:1 (SPANNER_EMULATOR_HOST) did not answer within 5s"}},
		{"no table", spannerServiceEnv(empty), []string{"table Leases does not exist", "LEASESVC_SPANNER_MIGRATE=true"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, e2e.Binary(t))
			cmd.Env = append(os.Environ(), "PORT=0")
			for k, v := range tc.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("leasesvc started (or hung) with a bad setting: err %v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("start-up error does not say %q:\n%s", w, out)
				}
			}
		})
	}
}
