package emulatortests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// The black-box check of issue 36 finding 1 (docs/contract.md §14, "Every
// owner, in order"), on the real binaries: three instances A, B and C of one
// backend; an agent holds a lease through a session on A; it sends a resume
// to B while B is paused (SIGSTOP), gives up, resumes on C with a later
// epoch and heartbeats C; a candidate waits for the lease on A; B wakes and
// reads the late resume. Before the fix, B took the session, released the
// lease a window later, and the candidate held it while the agent still
// led. Now the late resume is refused (session_conflict), and the candidate
// holds the lease only once the agent stopped and its deadline passed. The
// check then watches for the session lease TTL + a window more.

// pausedWindow, pausedTTL: the session window and lease TTL of the check.
const (
	pausedWindow = time.Second
	pausedTTL    = 3 * time.Second
)

func TestPausedResumePostgres(t *testing.T) {
	c := pgtest.Start(t)
	env := postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true")
	a := e2e.StartService(t, env)
	delete(env, "LEASESVC_POSTGRES_MIGRATE")
	pausedResume(t, env, a)
}

func TestPausedResumeFirestore(t *testing.T) {
	pausedResume(t, firestoreServiceEnv(t), nil)
}

func TestPausedResumeFirestoreEvents(t *testing.T) {
	topic, _ := eventsTopic(t)
	pausedResume(t, eventsEnv(t, uniqueCollection("paused"), topic), nil)
}

func TestPausedResumeSpanner(t *testing.T) {
	db, _ := spannerSetup(t)
	pausedResume(t, spannerServiceEnv(db), nil)
}

func TestPausedResumeSpannerEvents(t *testing.T) {
	db, _ := spannerSetup(t)
	topic, _ := eventsTopic(t)
	pausedResume(t, spannerServiceEnv(db, "LEASESVC_PUBSUB_TOPIC", topic, "LEASESVC_PROJECT", emulators.Project(),
		emulators.PubSubHostEnv, emulators.PubSub(t)), nil)
}

// pausedAgent is the agent's side of the check: the socket it heartbeats
// and its deadline (docs/contract.md §14, A3).
type pausedAgent struct {
	mu       sync.Mutex
	conn     *rawsession.Conn
	deadline time.Time
	stopped  bool
}

func (p *pausedAgent) beat(ctx context.Context) {
	t := time.NewTicker(pausedWindow / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		c, stopped := p.conn, p.stopped
		p.mu.Unlock()
		if stopped {
			return
		}
		_ = c.Heartbeat(ctx)
		p.note(c)
	}
}

// note carries c's latest ack into the deadline.
func (p *pausedAgent) note(c *rawsession.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c != p.conn {
		return // a retired socket's acks count no more
	}
	if a := c.Acked(); !a.IsZero() {
		if d := a.Add(pausedWindow * 9 / 10); d.After(p.deadline) {
			p.deadline = d
		}
	}
}

func (p *pausedAgent) leadsUntil() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deadline
}

// pausedResume runs the check on instances started with env (a, if given,
// is the first, already started: it created the table).
func pausedResume(t *testing.T, env map[string]string, a *e2e.Service) {
	e2e.Exclusive(t, "timing")
	env["LEASESVC_SESSION_LEASE_TTL"] = pausedTTL.String()
	if a == nil {
		a = e2e.StartService(t, env)
	}
	b, c := e2e.StartService(t, env), e2e.StartService(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("paused.%d", time.Now().UnixNano())

	// The agent holds the lease through a session on A.
	ca, err := rawsession.Dial(ctx, a.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opened, err := ca.Open(ctx, pausedWindow)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ca.Request(ctx, rawsession.Message{Type: "acquire", Name: name, Holder: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	held, err := rawsession.LeaseOf(m)
	if err != nil {
		t.Fatal(err)
	}
	claims := []rawsession.Held{{Name: name, Holder: "agent", FencingToken: held.FencingToken}}
	agent := &pausedAgent{conn: ca}
	go agent.beat(ctx)
	_ = ca.Heartbeat(ctx)

	// A resume to B while B is paused: the frame waits in B's socket.
	cb, err := rawsession.Dial(ctx, b.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Freeze(t)
	agent.mu.Lock()
	agent.conn = cb // A is retired: no heartbeat goes there any more
	agent.mu.Unlock()
	late := make(chan error, 1)
	go func() {
		_, err := cb.Resume(ctx, opened.SessionID, opened.Epoch+1, claims)
		late <- err
	}()
	// The agent waits for B's answer, in vain, then gives up on B while
	// its session still lives on A (A ends it a window after the agent's
	// last message there).
	if !faultWait(ctx, pausedWindow/3) {
		t.Fatal(ctx.Err())
	}

	// It gives up on B and resumes on C with a later epoch.
	cc, err := rawsession.Dial(ctx, c.URL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	agent.mu.Lock()
	agent.conn = cc
	agent.mu.Unlock()
	resumed, err := cc.Resume(ctx, opened.SessionID, opened.Epoch+2, claims)
	if err != nil || len(resumed.Lost) != 0 {
		t.Fatalf("resume on C: %+v, %v; want the lease taken over", resumed, err)
	}
	_ = cc.Heartbeat(ctx)

	// A candidate waits for the lease on A.
	type answer struct {
		at   time.Time
		code int
		body string
	}
	cand := make(chan answer, 1)
	go func() {
		body := `{"holder":"candidate","ttlMs":30000,"waitMs":60000}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL+"/v1/leases/"+name+":acquire", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cand <- answer{at: time.Now(), body: err.Error()}
			return
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&raw)
		cand <- answer{at: time.Now(), code: resp.StatusCode, body: string(raw)}
	}()

	// B wakes and reads the late resume; the agent goes on leading via C.
	if !faultWait(ctx, pausedWindow) { // B stays paused for a window
		t.Fatal(ctx.Err())
	}
	if err := b.Thaw(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-late:
		if rawsession.Code(err) != "session_conflict" {
			t.Fatalf("the late resume on B: %v; want session_conflict", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B did not answer the late resume within 30s of waking")
	}
	leadFor := pausedTTL + pausedWindow
	select {
	case got := <-cand:
		t.Fatalf("the candidate got %d %s at %v while the agent led until %v (via C)", got.code, got.body,
			got.at.Format("15:04:05.000"), agent.leadsUntil().Format("15:04:05.000"))
	case <-time.After(leadFor):
	}
	if until := agent.leadsUntil(); time.Until(until) <= 0 {
		t.Fatalf("the agent's deadline %v passed while it heartbeat C: C stopped acking", until.Format("15:04:05.000"))
	}

	// The agent stops (a crash): the candidate takes over after its
	// deadline, and nothing else happens for the TTL + a window.
	agent.mu.Lock()
	agent.stopped = true
	agent.mu.Unlock()
	var got answer
	select {
	case got = <-cand:
	case <-time.After(30 * time.Second):
		t.Fatal("the candidate did not get the lease within 30s of the agent's stop")
	}
	if until := agent.leadsUntil(); got.code != http.StatusOK || !got.at.After(until) {
		t.Fatalf("the candidate got %d %s at %v; want 200 after the agent's deadline %v", got.code, got.body,
			got.at.Format("15:04:05.000"), until.Format("15:04:05.000"))
	}
	if !faultWait(ctx, leadFor) { // a late resume would land within it
		t.Fatal(ctx.Err())
	}
	for _, in := range []*e2e.Service{a, b, c} {
		r := e2e.Client{URL: in.URL}.Do(t, http.MethodGet, "/v1/leases/"+name, "", "")
		if r.Status != http.StatusOK || r.Holder() != "candidate" || r.Token() != held.FencingToken+1 || r.Body["held"] != true {
			t.Fatalf("the lease on %s a TTL + a window after the takeover: %d %s; want held by the candidate at token %d", in.URL, r.Status, r.Raw, held.FencingToken+1)
		}
	}
}
