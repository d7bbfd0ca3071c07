package client_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// openSession opens a session of the fake on clock, closed at the end of
// the test.
func openSession(t *testing.T, f *fakeSessions, clock *fakeclock.Clock) (*client.Client, *client.Session) {
	t.Helper()
	return openSessionWith(t, f, client.Config{}, client.SessionConfig{Clock: clock})
}

// openSessionWith opens a session of the fake with these configurations,
// closed at the end of the test.
func openSessionWith(t *testing.T, f *fakeSessions, ccfg client.Config, scfg client.SessionConfig) (*client.Client, *client.Session) {
	t.Helper()
	c, err := client.New(f.URL, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenSession(t.Context(), scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Bounded: Close waits for a reconnection first, which a failed
		// test may have left hanging on a fake clock.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return c, s
}

// beat advances the clock by a heartbeat interval (250ms) and waits until
// the socket has got n heartbeats and the next one is scheduled.
func beat(t *testing.T, clock *fakeclock.Clock, sock *fakeSocket, n, timers int) {
	t.Helper()
	clock.Advance(250 * time.Millisecond)
	sock.f.await(t, "a heartbeat", func() bool { return sock.count("heartbeat") == n })
	waitFor(t, "the next heartbeat scheduled", func() bool { return clock.Timers() == timers })
}

// TestSessionDeadlineFollowsAckedHeartbeats: the session heartbeats every
// window/4 and its deadline is the send time of the last acknowledged
// heartbeat + window × (1 − DriftMargin); a heartbeat left unanswered does
// not move it (docs/contract.md §14).
func TestSessionDeadlineFollowsAckedHeartbeats(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	sock := f.socket(t, 0)
	if open := sock.messages("open"); len(open) != 1 || open[0]["windowMs"] != 1000.0 {
		t.Fatalf("open messages %v, want one with windowMs 1000", open)
	}
	waitFor(t, "the first heartbeat acknowledged", func() bool { return s.Deadline().Equal(epoch.Add(900 * time.Millisecond)) })
	waitFor(t, "the next heartbeat scheduled", func() bool { return clock.Timers() == 1 })

	beat(t, clock, sock, 2, 1)
	waitFor(t, "the second acknowledged", func() bool { return s.Deadline().Equal(epoch.Add(1150 * time.Millisecond)) })

	f.acks.Store(false)
	beat(t, clock, sock, 3, 1)
	if d := s.Deadline(); !d.Equal(epoch.Add(1150 * time.Millisecond)) {
		t.Fatalf("an unanswered heartbeat moved the deadline to +%v", d.Sub(epoch))
	}

	f.acks.Store(true)
	beat(t, clock, sock, 4, 1)
	waitFor(t, "the fourth acknowledged", func() bool { return s.Deadline().Equal(epoch.Add(1650 * time.Millisecond)) })

	var last float64
	for _, m := range sock.messages("") {
		if id, _ := m["id"].(float64); id <= last {
			t.Fatalf("request ids not increasing: %v after %v", id, last)
		} else {
			last = id
		}
	}
}

// sessionElector runs an Elector of the lease svc.session on the fake's
// shared session, on clock, until the test ends; deadlines records what
// OnSafeDeadline heard.
func sessionElector(t *testing.T, f *fakeSessions, clock *fakeclock.Clock, rec *term, edit func(*client.ElectorConfig)) (e *client.Elector, deadlines func() []time.Time, logs *syncBuffer) {
	t.Helper()
	c, err := client.New(f.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ds []time.Time
	logs = &syncBuffer{}
	cfg := rec.config(clock, "agent-a")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.Callbacks.OnSafeDeadline = func(d time.Time) {
		mu.Lock()
		ds = append(ds, d)
		mu.Unlock()
	}
	if edit != nil {
		edit(&cfg)
	}
	e, err = keeperElector(t, c, "svc.session", client.KeeperConfig{Clock: clock, Logger: cfg.Logger}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, e)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	return e, func() []time.Time { mu.Lock(); defer mu.Unlock(); return append([]time.Time(nil), ds...) }, logs
}

// syncBuffer is a bytes.Buffer for a logger written from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSessionTermEndsAtTheSessionDeadline: an Elector holds its lease
// through the Client's shared session by default, says so, and its term
// follows the session's deadline; when heartbeats go unanswered (the socket
// still open), the leading ctx ends at that deadline less CancelBefore,
// with ErrSafeDeadline.
func TestSessionTermEndsAtTheSessionDeadline(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	var rec term
	_, deadlines, logs := sessionElector(t, f, clock, &rec, nil)
	if !strings.Contains(logs.String(), "holding through a session (window 1s)") {
		t.Fatalf("the Elector did not say it holds through a session:\n%s", logs)
	}
	sock := f.socket(t, 0)
	if acq := sock.messages("acquire"); len(acq) != 1 || acq[0]["holder"] != "agent-a" || acq[0]["ttlMs"] != nil {
		t.Fatalf("acquires %v, want one by agent-a without ttlMs", acq)
	}
	if ds := deadlines(); len(ds) != 1 || !ds[0].Equal(epoch.Add(900*time.Millisecond)) {
		t.Fatalf("safe deadlines %v, want [+900ms]", ds)
	}
	// The session's heartbeat and the term's deadline (no renewal: the
	// session keeps the holding, and no checkpoint is pending).
	waitFor(t, "the term's timers", func() bool { return clock.Timers() == 2 })
	beat(t, clock, sock, 2, 2)
	waitFor(t, "the deadline moved by the acknowledged heartbeat", func() bool {
		ds := deadlines()
		return len(ds) == 2 && ds[1].Equal(epoch.Add(1150*time.Millisecond))
	})

	f.acks.Store(false)
	beat(t, clock, sock, 3, 2) // +500ms
	beat(t, clock, sock, 4, 2) // +750ms
	beat(t, clock, sock, 5, 2) // +1000ms
	clock.Advance(40 * time.Millisecond)
	if _, _, ctx := rec.get(); ctx.Err() != nil {
		t.Fatalf("the term ended at +1040ms, before its deadline: %v", context.Cause(ctx))
	}
	// +1050ms = 1150ms − CancelBefore (by default a tenth of the window).
	clock.Advance(10 * time.Millisecond)
	if at := rec.cancelledAt(t); !at.Equal(epoch.Add(1050 * time.Millisecond)) {
		t.Fatalf("leading ctx cancelled at +%v, want +1050ms", at.Sub(epoch))
	}
	if _, _, ctx := rec.get(); !errors.Is(context.Cause(ctx), client.ErrSafeDeadline) {
		t.Fatalf("cause %v, want ErrSafeDeadline", context.Cause(ctx))
	}
}

// TestSessionLostPushEndsTheTerm: the service's push that the holding was
// revoked ends the term at once, with ErrLost, without any clock moving.
func TestSessionLostPushEndsTheTerm(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	var rec term
	sessionElector(t, f, clock, &rec, nil)
	_, _, ctx := rec.get()
	tok, _ := client.TokenFromContext(ctx)
	f.socket(t, 0).send(map[string]any{"type": "revoked", "name": "svc.session", "fencingToken": tok, "reason": "maintenance", "operator": "admin@example"})
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLost) || !strings.Contains(cause.Error(), "maintenance") {
		t.Fatalf("cause %v, want ErrLost naming the reason", cause)
	}
}

// TestSessionCheckpointYieldAndReleaseTravelOverTheSession: a checkpoint is
// a renew on the socket, a yield push asks OnYieldRequested, and the
// step-down releases over the session with the term's token.
func TestSessionCheckpointYieldAndReleaseTravelOverTheSession(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	var rec term
	yielded := make(chan string, 1)
	e, _, _ := sessionElector(t, f, clock, &rec, func(cfg *client.ElectorConfig) {
		cfg.Callbacks.OnYieldRequested = func(_ context.Context, to string) { yielded <- to }
	})
	sock := f.socket(t, 0)
	if err := e.Checkpoint(t.Context(), map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	rn := sock.messages("renew")
	if len(rn) != 1 || rn[0]["checkpoint"].(map[string]any)["n"] != 1.0 || rn[0]["fencingToken"] != 1.0 {
		t.Fatalf("renews %v, want one with the checkpoint and token 1", rn)
	}
	sock.send(map[string]any{"type": "yield", "name": "svc.session", "fencingToken": 1, "to": "agent-b"})
	if to := <-yielded; to != "agent-b" {
		t.Fatalf("asked to yield to %q", to)
	}
	f.await(t, "the release", func() bool { return sock.count("release") == 1 })
	if rl := sock.messages("release"); rl[0]["fencingToken"] != 1.0 || rl[0]["holder"] != "agent-a" {
		t.Fatalf("release %v", rl[0])
	}
}

// TestSessionReconnectResumesWithItsLeases: a dropped socket is not a dead
// session: the Session dials again and resumes with the session id and
// every lease it holds, and its requests go on over the new socket.
func TestSessionReconnectResumesWithItsLeases(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	l, err := s.Acquire(t.Context(), "svc.r", client.AcquireRequest{Holder: "agent-a", TTL: time.Hour})
	if err != nil || l.FencingToken != 1 || !l.Held {
		t.Fatalf("acquire: %+v, %v", l, err)
	}
	_ = f.socket(t, 0).ws.CloseNow()
	sock := f.socket(t, 1)
	f.await(t, "the resume", func() bool { return sock.count("resume") == 1 })
	rs := sock.messages("resume")[0]
	leases, _ := rs["leases"].([]any)
	if rs["sessionId"] != "session-b" || len(leases) != 1 {
		t.Fatalf("resume %v, want session-b with one lease", rs)
	}
	if got := leases[0].(map[string]any); got["name"] != "svc.r" || got["holder"] != "agent-a" || got["fencingToken"] != 1.0 {
		t.Fatalf("resumed lease %v", got)
	}
	waitFor(t, "requests on the new socket", func() bool {
		_, err := s.Renew(t.Context(), "svc.r", client.RenewRequest{Holder: "agent-a", FencingToken: 1})
		return err == nil
	})
}

// TestSessionEndedLosesTheTermAndReopens: a resume refused because the
// session ended reports the holding lost (the term ends with ErrLost) and
// opens a new session.
func TestSessionEndedLosesTheTermAndReopens(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	var rec term
	sessionElector(t, f, clock, &rec, nil)
	_, _, ctx := rec.get()
	f.refuse.Store(true)
	_ = f.socket(t, 0).ws.CloseNow()
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	sock := f.socket(t, 2)
	f.await(t, "a new session opened", func() bool { return sock.count("open") == 1 })
}

// TestSessionMoveMakesBeforeBreak: asked to move, the Session resumes on a
// new socket while the old one is still open, then closes the old one
// without a close message (which would end the session).
func TestSessionMoveMakesBeforeBreak(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	if _, err := s.Acquire(t.Context(), "svc.m", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	old := f.socket(t, 0)
	old.send(map[string]any{"type": "move", "reason": "shutdown"})
	sock := f.socket(t, 1)
	f.await(t, "the resume", func() bool { return sock.count("resume") == 1 })
	if open := sock.messages("resume")[0]["othersOpen"]; open != 1 {
		t.Fatalf("%v other sockets open when the resume arrived, want the old one", open)
	}
	f.await(t, "the old socket closed", func() bool { return old.closed })
	if n := old.messages("close"); len(n) != 0 {
		t.Fatalf("the old socket got %v", n)
	}
	if _, err := s.Renew(t.Context(), "svc.m", client.RenewRequest{Holder: "agent-a", FencingToken: 1}); err != nil {
		t.Fatalf("renew after the move: %v", err)
	}
}

// TestSessionsUnsupported: a service whose session route answers 404, 405
// or 501 offers no sessions: OpenSession says so, and an Elector falls back
// to plain renewals, and says so.
func TestSessionsUnsupported(t *testing.T) {
	f := newFakeSessions(t)
	c, err := client.New(f.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []int{404, 405, 501} {
		f.status.Store(int32(st))
		if _, err := c.OpenSession(t.Context(), client.SessionConfig{}); !errors.Is(err, client.ErrSessionsUnsupported) {
			t.Fatalf("%d: %v, want ErrSessionsUnsupported", st, err)
		}
	}
	f.status.Store(401)
	if _, err := c.OpenSession(t.Context(), client.SessionConfig{}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("401: %v, want ErrUnauthenticated", err)
	}

	clock := fakeclock.New(epoch)
	svc := newService(t, clock)
	var rec term
	logs := &syncBuffer{}
	cfg := rec.config(clock, "agent-a")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	e, err := keeperElector(t, svc.client(t, client.Config{MaxAttempts: 1}), "svc.plain", client.KeeperConfig{Clock: clock, Logger: cfg.Logger}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, e)
	waitFor(t, "leading", func() bool { n, _, _ := rec.get(); return n == 1 })
	if !strings.Contains(logs.String(), "with plain renewals (ttl 30s): the service offers no sessions") || svc.acquires.Load() != 1 {
		t.Fatalf("acquires %d; log:\n%s", svc.acquires.Load(), logs)
	}
}

// TestSessionAcquireAnsweredDuringAResumeIsAcquiredAgain: an acquire
// answered on the old socket after the resume of a move was sent was not
// among the holdings that resume claimed, so the new socket's acks do not
// vouch for it: Acquire sends it again through the new socket and returns
// only that answer (docs/contract.md §14, why the agent always stops, steps 5 and 6).
func TestSessionAcquireAnsweredDuringAResumeIsAcquiredAgain(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	logs := &syncBuffer{}
	_, s := openSessionWith(t, f, client.Config{}, client.SessionConfig{Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	old := f.socket(t, 0)
	f.holdAcquires.Store(true)
	f.stallResumes.Store(true)
	type answer struct {
		l   client.Lease
		err error
	}
	done := make(chan answer, 1)
	go func() {
		l, err := s.Acquire(t.Context(), "svc.race", client.AcquireRequest{Holder: "agent-a"})
		done <- answer{l, err}
	}()
	f.await(t, "the acquire on the old socket", func() bool { return old.count("acquire") == 1 })
	old.send(map[string]any{"type": "move", "reason": "shutdown"})
	sock := f.socket(t, 1)
	f.await(t, "the resume", func() bool { return sock.count("resume") == 1 })
	if leases, _ := sock.messages("resume")[0]["leases"].([]any); len(leases) != 0 {
		t.Fatalf("the resume claimed %v before the acquire was answered", leases)
	}
	// The old socket answers the acquire now, after the resume was sent;
	// then the resume is answered.
	f.holdAcquires.Store(false)
	f.flush()
	waitFor(t, "the acquire's answer read on the old socket", func() bool { return strings.Contains(logs.String(), "acquiring again") })
	f.answerStalled()
	a := <-done
	if a.err != nil || !a.l.Held || a.l.FencingToken != 1 {
		t.Fatalf("acquire: %+v, %v", a.l, a.err)
	}
	if n := sock.messages("acquire"); len(n) != 1 || n[0]["name"] != "svc.race" || n[0]["holder"] != "agent-a" {
		t.Fatalf("acquires on the new socket when Acquire returned: %v, want the same acquire again", n)
	}
}

// TestSessionMoveWhoseResumeWasSentButUnansweredDropsTheOldSocket: once a
// resume was sent, its instance may own the session, while the old one
// still acks (it does not know yet). So no heartbeat goes on the old socket
// after the resume was sent, and when the resume fails the old socket is
// dropped and the session resumes again, rather than staying on it
// (docs/contract.md §14, why the agent always stops, steps 5 and 6).
func TestSessionMoveWhoseResumeWasSentButUnansweredDropsTheOldSocket(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSessionWith(t, f, client.Config{RequestTimeout: 200 * time.Millisecond}, client.SessionConfig{Clock: clock})
	old := f.socket(t, 0)
	f.await(t, "the first heartbeat", func() bool { return old.count("heartbeat") == 1 })
	waitFor(t, "the first heartbeat acknowledged", func() bool { return !s.Deadline().IsZero() })
	before := s.Deadline()
	f.stallResumes.Store(true)
	old.send(map[string]any{"type": "move", "reason": "max_age"})
	sock := f.socket(t, 1)
	f.await(t, "the resume", func() bool { return sock.count("resume") == 1 })
	f.stallResumes.Store(false)
	// The resume goes unanswered (RequestTimeout): the old socket is
	// dropped, and the session resumes on a third socket.
	f.await(t, "the old socket dropped", func() bool { return old.closed })
	third := f.socket(t, 2)
	f.await(t, "the second resume", func() bool { return third.count("resume") == 1 })
	if n := len(old.messages("heartbeat")); n != 1 {
		t.Fatalf("the old socket got %d heartbeats, want none after the resume was sent", n)
	}
	f.await(t, "heartbeats on the third socket", func() bool { return third.count("heartbeat") >= 1 })
	if d := s.Deadline(); !d.Equal(before) {
		t.Fatalf("deadline +%v, want +%v: the fake clock did not move", d.Sub(epoch), before.Sub(epoch))
	}
}
