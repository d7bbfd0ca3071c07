package httpapi_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/overload"
	"github.com/leasesvc/leasesvc/session"
)

// overloadedInstance is a session instance whose overload manager reads a
// memory figure the test sets, and samples only when the test says.
func overloadedInstance(t *testing.T) (*sessionInstance, *overload.Manager, *atomic.Int64, *auditSink) {
	t.Helper()
	var used atomic.Int64
	m, err := overload.New(overload.Config{Soft: 100 << 20, Hard: 200 << 20, Sample: used.Load})
	if err != nil {
		t.Fatal(err)
	}
	sink, log := newAuditSink()
	in := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{Audit: log, Overload: m})
	return in, m, &used, sink
}

// rest sends one request to in and returns its status.
func rest(t *testing.T, in *sessionInstance, method, path, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, in.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%s %s: 503 without Retry-After: 1", method, path)
	}
	return resp.StatusCode
}

// TestOverloadSoftRefusesNewWorkKeepsHoldings: past the soft threshold an
// acquire, a read, a list, a stream and a session upgrade are 503 with
// Retry-After, and audited; a renew and a release of a holding, and a
// session's heartbeats, go on; a waiting acquire is shed with 503 and a
// stream ends with its overflow event. Below it, all is served again.
func TestOverloadSoftRefusesNewWorkKeepsHoldings(t *testing.T) {
	in, m, used, sink := overloadedInstance(t)
	if st := rest(t, in, "POST", "/v1/leases/held:acquire", `{"holder":"a","ttlMs":30000}`); st != 200 {
		t.Fatalf("acquire before the overload: %d", st)
	}
	w := dial(t, in.srv.URL, "")
	w.open(1000)
	// A stream and a waiting acquire, open before the overload.
	sreq, _ := http.NewRequestWithContext(t.Context(), "GET", in.srv.URL+"/v1/leases/held:watch", nil)
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil || sresp.StatusCode != 200 {
		t.Fatalf("watch: %v %v", err, sresp)
	}
	defer sresp.Body.Close()
	waited := make(chan int, 1)
	go func() {
		waited <- rest(t, in, "POST", "/v1/leases/held:acquire", `{"holder":"b","ttlMs":30000,"waitMs":60000}`)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for in.h.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the waiting acquire did not start")
		}
		time.Sleep(time.Millisecond)
	}

	used.Store(150 << 20)
	if m.Check() != overload.Soft {
		t.Fatal("not soft at 150 MiB")
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/leases/other:acquire", `{"holder":"a","ttlMs":30000}`},
		{"GET", "/v1/leases/held", ""},
		{"GET", "/v1/leases", ""},
		{"GET", "/v1/leases/held:watch", ""},
	} {
		if st := rest(t, in, r.method, r.path, r.body); st != 503 {
			t.Fatalf("%s %s past the soft threshold: %d; want 503", r.method, r.path, st)
		}
	}
	if l := sink.wait(t, "overload_refuse"); l.Outcome != "unavailable" || !strings.Contains(l.Detail, "LEASESVC_OVERLOAD_SOFT") {
		t.Fatalf("audit line %+v", l)
	}
	if st, code := dialStatus(t, wsURL(in.srv), ""); st != 503 || code != "unavailable" {
		t.Fatalf("a session upgrade past the soft threshold: %d %s; want 503 unavailable", st, code)
	}
	w.send("acquire", map[string]any{"name": "s1", "holder": "a"})
	if e := w.expect("error"); problemCode(e) != "unavailable" {
		t.Fatalf("a session acquire past the soft threshold: %v", e)
	}
	w.ackedHeartbeat()
	// The wait and the stream are shed: the oldest first, a sample each.
	m.Check()
	m.Check()
	select {
	case st := <-waited:
		if st != 503 {
			t.Fatalf("the shed waiting acquire answered %d; want 503", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting acquire was not shed")
	}
	if !readsOverflow(t, sresp) {
		t.Fatal("the shed stream ended without an overflow event")
	}
	if st := rest(t, in, "POST", "/v1/leases/held:renew", `{"holder":"a","fencingToken":1,"ttlMs":30000}`); st != 200 {
		t.Fatalf("a renew past the soft threshold: %d; want 200", st)
	}
	if st := rest(t, in, "POST", "/v1/leases/held:release", `{"holder":"a","fencingToken":1}`); st != 200 {
		t.Fatalf("a release past the soft threshold: %d; want 200", st)
	}

	used.Store(10 << 20)
	if m.Check() != overload.Normal {
		t.Fatal("not normal at 10 MiB")
	}
	if st := rest(t, in, "GET", "/v1/leases/held", ""); st != 200 {
		t.Fatalf("a read below the thresholds: %d; want 200", st)
	}
}

// readsOverflow reads an event stream until its overflow event.
func readsOverflow(t *testing.T, resp *http.Response) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	defer context.AfterFunc(ctx, func() { _ = resp.Body.Close() })()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: overflow" {
			return true
		}
	}
	return false
}

// TestOverloadHardClosesTheHeaviestSockets: past the hard threshold the
// heaviest caller's session socket is closed (1013), and its session
// lives on: resumed, it still holds its lease.
func TestOverloadHardClosesTheHeaviestSockets(t *testing.T) {
	in, m, used, _ := overloadedInstance(t)
	w := dial(t, in.srv.URL, "")
	opened := w.open(1000)
	w.send("acquire", map[string]any{"name": "kept", "holder": "a"})
	res := w.expect("result")
	used.Store(250 << 20)
	if m.Check() != overload.Hard {
		t.Fatal("not hard at 250 MiB")
	}
	if code := w.closed(); code != websocket.StatusTryAgainLater {
		t.Fatalf("the heaviest socket closed with %v; want 1013", code)
	}
	used.Store(10 << 20)
	m.Check()
	lease := res["lease"].(map[string]any)
	r := dial(t, in.srv.URL, "")
	r.send("resume", map[string]any{"sessionId": opened["sessionId"], "epoch": opened["epoch"].(float64) + 1,
		"leases": []map[string]any{{"name": "kept", "holder": "a", "fencingToken": lease["fencingToken"]}}})
	got := r.expect("resumed")
	if ls, _ := got["leases"].([]any); len(ls) != 1 {
		t.Fatalf("resumed %v; want the lease kept", got)
	}
}
