package httpapi_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// TestSessionDefaultScale: nothing legitimate is refused at the
// documented scale. At the default limits (900 sessions an instance, 100
// a caller, the rate limit of LEASESVC_RATE_LIMIT's default with
// authentication: 100 a second, burst 200, and a memory budget of
// LEASESVC_MEMORY_BUDGET's and LEASESVC_MEMORY_PER_CALLER's defaults:
// 112 MiB, 28 MiB a caller), ten principals open 900 sessions, one in
// nine acquires a lease (a write keeps half the bucket: 90 upgrades and
// 10 writes a principal fit), each has a heartbeat acked (heartbeats take
// nothing from the bucket); the 901st socket is refused (429), and
// everything comes back when they close. The window
// is 60 s so that the test does not hang on the scheduler: no limit
// depends on it (cmd/leasebench/sessionsockets runs the same at 1 s).
func TestSessionDefaultScale(t *testing.T) {
	if testing.Short() {
		t.Skip("900 sockets")
	}
	budget, err := membudget.New(112<<20, 28<<20)
	if err != nil {
		t.Fatal(err)
	}
	in := newSessionInstance(t, memory.New(), session.Config{},
		httpapi.Config{Authenticator: tokenAuth{}, Limiter: auth.NewLimiter(100, 200), Limits: httpapi.Limits{Memory: budget}})
	done := socketsDone(t, in.srv)
	ws := make([]*wsClient, 0, session.DefaultMaxSessions)
	for i := range session.DefaultMaxSessions {
		w := dial(t, in.srv.URL, "p"+strconv.Itoa(i%10))
		w.open(60000)
		if (i/10)%9 == 0 { // ten writes a principal among its 90 upgrades, within its bucket
			w.send("acquire", map[string]any{"name": "scale." + strconv.Itoa(i), "holder": "h"})
			w.expect("result")
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		w.ackedHeartbeat()
	}
	if in.reg.Len() != session.DefaultMaxSessions {
		t.Fatalf("%d sessions; want %d", in.reg.Len(), session.DefaultMaxSessions)
	}
	if st, code := dialStatus(t, wsURL(in.srv), "p10"); st != 429 || code != "resource_exhausted" {
		t.Fatalf("the 901st socket: %d %s; want 429 resource_exhausted", st, code)
	}
	if used := budget.Stats().Used; used > int64(session.DefaultMaxSessions)*(httpapi.SessionCost+1<<10) {
		t.Fatalf("%d bytes charged for %d sessions", used, session.DefaultMaxSessions)
	}
	// Beside them, in the same instance at the same defaults, a prefix
	// stream of 10,000 leases is served whole (docs/contract.md §16).
	const many = 10000
	for i := range many {
		if _, err := in.m.Acquire(t.Context(), lease.AcquireRequest{Name: fmt.Sprintf("many.%05d", i), Holder: "h", TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	st := e2e.WatchPrefix(t, e2e.Client{URL: in.srv.URL, Token: "reader"}, "many.", "")
	for i := range many {
		if ev := st.Next(t); ev.Event != "snapshot" {
			t.Fatalf("event %d of the prefix stream beside %d sessions: %s %s; want a snapshot of each of %d leases",
				i, session.DefaultMaxSessions, ev.Event, ev.Data, many)
		}
	}
	st.Close()
	for _, w := range ws {
		_ = w.c.Close(websocket.StatusNormalClosure, "")
	}
	waitDone(t, done, len(ws))
	if used := budget.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after every socket closed; want 0", used)
	}
}
