package emulatortests

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// postgresServiceEnv is the environment of a leasesvc over cluster c.
func postgresServiceEnv(c *pgtest.Cluster, extra ...string) map[string]string {
	env := map[string]string{"LEASESVC_BACKEND": "postgres", "LEASESVC_POSTGRES_URL": c.URL}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// TestPostgresServiceOverHTTP drives the real binary over a throwaway
// PostgreSQL through the lease flows and every malformed input of
// docs/contract.md §4.
func TestPostgresServiceOverHTTP(t *testing.T) {
	c := pgtest.Start(t)
	svc := e2e.StartService(t, postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true"))
	e2e.Flows(t, svc.URL)
	stopCleanly(t, svc)
}

// TestPostgresServiceRestart creates the table through
// LEASESVC_POSTGRES_MIGRATE=true, then restarts the binary after SIGKILL
// (without migrate) and after a restart of PostgreSQL itself: fencing
// tokens continue where they were and a holding survives.
func TestPostgresServiceRestart(t *testing.T) {
	c := pgtest.Start(t)
	svc := e2e.StartService(t, postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true"))
	cl := e2e.Client{URL: svc.URL}
	turns, kept := e2e.UniqueName("turns"), e2e.UniqueName("kept")
	r := cl.Post(t, "/v1/leases/"+kept+":acquire", `{"holder":"keeper","ttlMs":120000,"metadata":{"z":1}}`)
	if r.Status != http.StatusOK || r.Token() != 1 {
		t.Fatalf("acquire %s: %d %s", kept, r.Status, r.Raw)
	}
	for i := range 3 {
		r = cl.Post(t, "/v1/leases/"+turns+":acquire", `{"holder":"a","ttlMs":60000}`)
		if want := int64(i + 1); r.Status != http.StatusOK || r.Token() != want {
			t.Fatalf("turn %d: acquire = %d %s, want token %d", i, r.Status, r.Raw, want)
		}
		if r = cl.Post(t, "/v1/leases/"+turns+":release", `{"holder":"a","fencingToken":`+strconv.FormatInt(r.Token(), 10)+`}`); r.Status != http.StatusOK {
			t.Fatalf("turn %d: release: %d %s", i, r.Status, r.Raw)
		}
		r = cl.Post(t, "/v1/leases/"+kept+":acquire", `{"holder":"other","ttlMs":60000}`)
		if r.Status != http.StatusConflict || r.Holder() != "keeper" || r.Token() != 1 {
			t.Fatalf("turn %d: acquire of the kept lease by another = %d %s, want lease_held by keeper", i, r.Status, r.Raw)
		}
		switch i {
		case 0:
			svc.Kill() // a crash of the service
			svc = e2e.StartService(t, postgresServiceEnv(c))
		case 1:
			c.Restart() // a crash of the database: the same service goes on once it is back
			if !faultPoll(t.Context(), 20*time.Second, func() bool { return cl.Get(t, "/readyz").Status == http.StatusOK }) {
				t.Fatalf("not ready 20s after PostgreSQL restarted:\n%s", svc.Output())
			}
		}
		cl = e2e.Client{URL: svc.URL}
	}
	stopCleanly(t, svc)
}
