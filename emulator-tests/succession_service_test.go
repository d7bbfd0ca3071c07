package emulatortests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// waitingCandidate sends a waiting acquire with a priority to url in the
// background; cancel closes its connection, as a client that goes away.
type waitingCandidate struct {
	cancel context.CancelFunc
	done   chan struct{}
	status int
	body   map[string]any
}

func startCandidate(t *testing.T, url, name, holder string, priority int) *waitingCandidate {
	ctx, cancel := context.WithCancel(t.Context())
	c := &waitingCandidate{cancel: cancel, done: make(chan struct{})}
	body := fmt.Sprintf(`{"holder":%q,"ttlMs":60000,"waitMs":60000,"priority":%d}`, holder, priority)
	go func() {
		defer close(c.done)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/leases/"+name+":acquire", strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		c.status = resp.StatusCode
		_ = json.Unmarshal(raw, &c.body)
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// candidates returns the count of registered candidates that GET shows.
func candidates(t *testing.T, cl e2e.Client, name string) int {
	f, _ := cl.Get(t, "/v1/leases/"+name).Body["candidates"].(float64)
	return int(f)
}

// awaitCandidates polls until name shows n candidates and returns how long
// that took.
func awaitCandidates(t *testing.T, cl e2e.Client, name string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	for candidates(t, cl, name) != n {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("%s: %d candidates, want %d, after 20s", name, candidates(t, cl, name), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestSuccessionAcrossInstances runs two real leasesvc binaries over one
// PostgreSQL (docs/contract.md §8): a candidate whose client goes away is
// forgotten within 2 s; one left behind by a SIGKILLed instance keeps a
// released lease reserved (a plain acquire is 409 lease_reserved) for at
// most 5 s, after which the live candidate on the other instance gets it.
func TestSuccessionAcrossInstances(t *testing.T) {
	c := pgtest.Start(t)
	a := e2e.StartService(t, postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true"))
	b := e2e.StartService(t, postgresServiceEnv(c))
	ca := e2e.Client{URL: a.URL}
	name := e2e.UniqueName("succession")
	r := ca.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"holder","ttlMs":60000}`)
	if r.Status != http.StatusOK {
		t.Fatalf("acquire: %d %s", r.Status, r.Raw)
	}
	token := r.Token()

	gone := startCandidate(t, b.URL, name, "c10", 10)
	five := startCandidate(t, a.URL, name, "c05", 5)
	awaitCandidates(t, ca, name, 2)
	gone.cancel()
	d := awaitCandidates(t, ca, name, 1)
	t.Logf("a candidate whose client went away was forgotten after %v", d)
	if d > 2*time.Second {
		t.Errorf("a gone candidate was forgotten after %v, want ≤ 2s", d)
	}

	startCandidate(t, b.URL, name, "c10", 10)
	awaitCandidates(t, ca, name, 2)
	b.Kill() // its candidate stays registered
	rel := ca.Post(t, "/v1/leases/"+name+":release", `{"holder":"holder","fencingToken":`+strconv.FormatInt(token, 10)+`}`)
	released := time.Now()
	if rel.Status != http.StatusOK {
		t.Fatalf("release: %d %s", rel.Status, rel.Raw)
	}
	p := ca.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"plain","ttlMs":60000}`)
	if ra, _ := strconv.Atoi(p.Header.Get("Retry-After")); p.Status != http.StatusConflict || p.Code() != "lease_reserved" ||
		p.Body["reservedFor"] != "c10" || ra < 1 || ra > 5 || p.Token() != token {
		t.Fatalf("plain acquire during the dead candidate's reservation = %d %s (Retry-After %q), want 409 lease_reserved for c10",
			p.Status, p.Raw, p.Header.Get("Retry-After"))
	}
	select {
	case <-five.done:
	case <-time.After(20 * time.Second):
		t.Fatal("c05 did not get the lease within 20s of the release")
	}
	took := time.Since(released)
	t.Logf("a candidate of a SIGKILLed instance kept the released lease free for %v", took)
	if five.status != http.StatusOK || five.body["holder"] != "c05" || int64(five.body["fencingToken"].(float64)) != token+1 {
		t.Fatalf("c05: %d %v, want the lease with token %d", five.status, five.body, token+1)
	}
	if took > 6500*time.Millisecond {
		t.Errorf("the dead candidate delayed the free lease by %v, want ≤ 5s (+ one poll and the request)", took)
	}
	stopCleanly(t, a)
}
