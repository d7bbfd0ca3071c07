package httpapi_test

import (
	"strconv"
	"testing"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/membudget"
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
	for _, w := range ws {
		_ = w.c.Close(websocket.StatusNormalClosure, "")
	}
	waitDone(t, done, len(ws))
	if used := budget.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after every socket closed; want 0", used)
	}
}
