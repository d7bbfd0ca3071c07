package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// The tests of this file hold the Session to "Every owner, in order" of
// docs/contract.md §14 (A1–A3, step 6), against the fake.

// resumeOn waits for the n-th resume (from 1) on sock and returns it.
func resumeOn(t *testing.T, sock *fakeSocket, n int) map[string]any {
	t.Helper()
	sock.f.await(t, "a resume", func() bool { return sock.count("resume") >= n })
	return sock.messages("resume")[n-1]
}

// claimed returns the names of the leases a resume claims.
func claimed(resume map[string]any) []string {
	var names []string
	ls, _ := resume["leases"].([]any)
	for _, l := range ls {
		names = append(names, l.(map[string]any)["name"].(string))
	}
	return names
}

// epochOf returns the epoch a resume proposes (0: none).
func epochOf(resume map[string]any) int64 {
	e, _ := resume["epoch"].(float64)
	return int64(e)
}

// connectedOn waits until the session heartbeats on sock: it made sock
// its socket.
func connectedOn(t *testing.T, sock *fakeSocket) {
	t.Helper()
	sock.f.await(t, "a heartbeat on the new socket", func() bool { return sock.count("heartbeat") >= 1 })
}

// TestSessionSpeaksV2: the Session offers leasesvc.session.v2, whose
// resumes propose their epoch (docs/contract.md §14, Transport).
func TestSessionSpeaksV2(t *testing.T) {
	f := newFakeSessions(t)
	openSession(t, f, fakeclock.New(epoch))
	sock := f.socket(t, 0)
	if got := sock.ws.Subprotocol(); got != "leasesvc.session.v2" {
		t.Fatalf("subprotocol %q, want leasesvc.session.v2", got)
	}
}

// TestSessionResumesProposeIncreasingEpochs (A1): each resume proposes one
// above every epoch the session saw or proposed, recorded before it is
// sent: a resume that went unanswered (its socket dropped) still counts,
// so the next proposes higher, and that stale resume, delivered late, is
// refused (session_conflict) instead of taking the session back.
func TestSessionResumesProposeIncreasingEpochs(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	if _, err := s.Acquire(t.Context(), "svc.e", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	a := f.socket(t, 0)
	f.stallResumes.Store(true)
	a.send(map[string]any{"type": "move", "reason": "shutdown"})
	b := f.socket(t, 1)
	if e := epochOf(resumeOn(t, b, 1)); e != 2 {
		t.Fatalf("the first resume proposes epoch %d, want 2 (opened at 1)", e)
	}
	// The resume goes unanswered: its socket drops. The old socket is
	// dropped too (the resume may have reached the service), and the next
	// resume proposes 3, not 2 again.
	f.stallResumes.Store(false)
	_ = b.ws.CloseNow()
	c := f.socket(t, 2)
	if r := resumeOn(t, c, 1); epochOf(r) != 3 || strings.Join(claimed(r), ",") != "svc.e" {
		t.Fatalf("the second resume %v, want epoch 3 claiming svc.e", r)
	}
	f.await(t, "the old socket dropped", func() bool { return a.closed })
	connectedOn(t, c)
	_ = c.ws.CloseNow()
	d := f.socket(t, 3)
	if e := epochOf(resumeOn(t, d, 1)); e != 4 {
		t.Fatalf("the third resume proposes epoch %d, want 4 (the session resumed at 3)", e)
	}
	connectedOn(t, d)
	// The first resume, held back until now, arrives late: it is refused.
	f.answerStalled()
	f.mu.Lock()
	defer f.mu.Unlock()
	last := f.resumes[len(f.resumes)-1]
	if last.epoch != 2 || last.code != "session_conflict" || f.known["session-b"].epoch != 4 {
		t.Fatalf("the late resume %+v left the session at epoch %d; want it refused with session_conflict, the session at 4",
			last, f.known["session-b"].epoch)
	}
}

// TestSessionConflictResumesAgainHigher: a resume answered 409
// session_conflict (the session is at that epoch or above) is no end of
// the session: the Session resumes again at once, on a new socket, above
// the epoch the conflict names, claiming its holdings; it opens nothing.
func TestSessionConflictResumesAgainHigher(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	if _, err := s.Acquire(t.Context(), "svc.c", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	f.bumpEpoch(5)
	_ = f.socket(t, 0).ws.CloseNow()
	b := f.socket(t, 1)
	if e := epochOf(resumeOn(t, b, 1)); e != 2 {
		t.Fatalf("the first resume proposes epoch %d, want 2", e)
	}
	c := f.socket(t, 2)
	r := resumeOn(t, c, 1)
	if epochOf(r) != 6 || strings.Join(claimed(r), ",") != "svc.c" {
		t.Fatalf("the resume after the conflict %v, want epoch 6 claiming svc.c", r)
	}
	connectedOn(t, c)
	for i, sock := range []*fakeSocket{b, c} {
		if n := len(sock.messages("open")); n != 0 {
			t.Fatalf("socket %d got %d opens: the conflict was taken for the session's end", i+1, n)
		}
	}
	if _, err := s.Renew(t.Context(), "svc.c", client.RenewRequest{Holder: "agent-a", FencingToken: 1}); err != nil {
		t.Fatalf("renew after the resume: %v", err)
	}
}

// TestSessionIgnoresPushesOfARetiredSocket (A2, issue 36 finding 5): once a
// resume went out on a new socket, the old socket's pushes are ignored: a
// lost pushed there (its instance no longer owns the session) must not
// drop a holding the resume claims and the new owner holds.
func TestSessionIgnoresPushesOfARetiredSocket(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	logs := &syncBuffer{}
	_, s := openSessionWith(t, f, client.Config{}, client.SessionConfig{Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if _, err := s.Acquire(t.Context(), "svc.p", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	a := f.socket(t, 0)
	f.stallResumes.Store(true)
	a.send(map[string]any{"type": "move", "reason": "shutdown"})
	b := f.socket(t, 1)
	if got := claimed(resumeOn(t, b, 1)); strings.Join(got, ",") != "svc.p" {
		t.Fatalf("the resume claims %v, want svc.p", got)
	}
	a.send(map[string]any{"type": "lost", "name": "svc.p", "fencingToken": 1, "reason": "taken"})
	a.send(map[string]any{"type": "revoked", "name": "svc.p", "fencingToken": 1, "reason": "x", "operator": "op"})
	waitFor(t, "the pushes read", func() bool {
		return strings.Count(logs.String(), "ignored a push of a replaced socket") == 2 || strings.Contains(logs.String(), "lease lost")
	})
	if strings.Contains(logs.String(), "lease lost") {
		t.Fatalf("the Session acted on a push of the retired socket:\n%s", logs)
	}
	f.stallResumes.Store(false)
	f.answerStalled()
	connectedOn(t, b)
	// The holding is still the session's: the next resume claims it.
	_ = b.ws.CloseNow()
	c := f.socket(t, 2)
	if got := claimed(resumeOn(t, c, 1)); strings.Join(got, ",") != "svc.p" {
		t.Fatalf("the next resume claims %v, want svc.p", got)
	}
}

// TestSessionIgnoresAcksOfARetiredSocket (A2): an ack on a retired socket
// counts for nothing, even of a heartbeat sent before the retirement. Its
// instance may have queued a lost before it (the backend was out, the
// lease ran out and was taken), which the Session ignores on a retired
// socket; counting the ack would lead the lost lease (the simulation's
// finding, seed 141403523).
func TestSessionIgnoresAcksOfARetiredSocket(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	logs := &syncBuffer{}
	_, s := openSessionWith(t, f, client.Config{}, client.SessionConfig{Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if _, err := s.Acquire(t.Context(), "svc.p", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	a := f.socket(t, 0)
	waitFor(t, "the first heartbeat acknowledged", func() bool { return !s.Deadline().IsZero() })
	waitFor(t, "the next heartbeat scheduled", func() bool { return clock.Timers() == 1 })
	before := s.Deadline()
	f.acks.Store(false) // the instance answers nothing for now
	beat(t, clock, a, 2, 1)
	hb := a.messages("heartbeat")[1]["id"]
	clock.Advance(10 * time.Millisecond) // the heartbeat went out before the retirement
	f.stallResumes.Store(true)
	a.send(map[string]any{"type": "move", "reason": "shutdown"})
	resumeOn(t, f.socket(t, 1), 1) // a is retired
	a.send(map[string]any{"type": "lost", "name": "svc.p", "fencingToken": 1, "reason": "taken"})
	a.send(map[string]any{"type": "ack", "re": hb})
	a.send(map[string]any{"type": "yield", "name": "svc.p", "fencingToken": 1, "to": "x"}) // read after the ack
	waitFor(t, "the pushes read", func() bool {
		return strings.Count(logs.String(), "ignored a push of a replaced socket") == 2
	})
	if d := s.Deadline(); !d.Equal(before) {
		t.Fatalf("the deadline moved from %v to %v on an ack of the retired socket, after its lost", before, d)
	}
}

// TestSessionReplacesASilentSocket (A3, issue 36 finding 4): a socket on
// which nothing arrived for 4 windows (at least 5s) while heartbeats went
// out (a paused instance) is dropped, and the session resumes on a new
// one, rather than heartbeating into it forever.
func TestSessionReplacesASilentSocket(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	a := f.socket(t, 0)
	waitFor(t, "the first heartbeat acknowledged", func() bool { return !s.Deadline().IsZero() })
	waitFor(t, "the next heartbeat scheduled", func() bool { return clock.Timers() == 1 })
	f.acks.Store(false) // the instance pauses: nothing arrives from here on
	// Heartbeat 2 goes out at +250ms, the first since the last ack; the
	// 21st at +5000ms, 4.75s later.
	for n := 2; n <= 21; n++ {
		beat(t, clock, a, n, 1)
	}
	f.mu.Lock()
	closed := a.closed
	f.mu.Unlock()
	if closed {
		t.Fatal("the socket was dropped before 5s of silence")
	}
	clock.Advance(250 * time.Millisecond) // +5250ms: 5s of silence
	f.await(t, "the socket dropped, or a 22nd heartbeat", func() bool { return a.closed || a.count("heartbeat") > 21 })
	if n := len(a.messages("heartbeat")); n != 21 {
		t.Fatalf("%d heartbeats on the silent socket, want 21", n)
	}
	f.await(t, "the socket dropped", func() bool { return a.closed })
	if e := epochOf(resumeOn(t, f.socket(t, 1), 1)); e != 2 {
		t.Fatalf("the resume after the silence proposes epoch %d, want 2", e)
	}
}

// TestSessionReleaseGoesAgainThroughTheResumedSocket (issue 36 finding 3,
// docs/contract.md §14 step 6): a release or transfer answered 503 (the
// session ended on its socket) or left unanswered because its socket
// dropped keeps the holding: the next resume claims it, and the release
// or transfer goes again through the resumed socket, whose answer the
// caller gets. The holding is forgotten then: a later resume claims
// nothing.
func TestSessionReleaseGoesAgainThroughTheResumedSocket(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   string
		fail func(*fakeSessions)
	}{
		{"release answered 503", "release", func(f *fakeSessions) { f.endOnRelease.Store(true) }},
		{"release unanswered, socket dropped", "release", func(f *fakeSessions) { f.dropOnRelease.Store(true) }},
		{"transfer answered 503", "transfer", func(f *fakeSessions) { f.endOnRelease.Store(true) }},
		{"transfer unanswered, socket dropped", "transfer", func(f *fakeSessions) { f.dropOnRelease.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(epoch)
			f := newFakeSessions(t)
			_, s := openSession(t, f, clock)
			if _, err := s.Acquire(t.Context(), "svc.rel", client.AcquireRequest{Holder: "agent-a"}); err != nil {
				t.Fatal(err)
			}
			a := f.socket(t, 0)
			tc.fail(f)
			var l client.Lease
			var err error
			if tc.op == "release" {
				l, err = s.ReleaseWith(t.Context(), "svc.rel", client.ReleaseRequest{Holder: "agent-a", FencingToken: 1})
			} else {
				l, err = s.Transfer(t.Context(), "svc.rel", client.TransferRequest{Holder: "agent-a", FencingToken: 1, To: "agent-b"})
			}
			if err != nil || l.Held {
				t.Fatalf("%s: %+v, %v; want the holding ended", tc.op, l, err)
			}
			if n := len(a.messages(tc.op)); n != 1 {
				t.Fatalf("%d %ss on the first socket, want 1", n, tc.op)
			}
			b := f.socket(t, 1)
			if got := claimed(resumeOn(t, b, 1)); strings.Join(got, ",") != "svc.rel" {
				t.Fatalf("the resume claims %v, want svc.rel", got)
			}
			if ops := b.messages(tc.op); len(ops) != 1 || ops[0]["fencingToken"] != 1.0 {
				t.Fatalf("%ss on the resumed socket: %v, want the same one again", tc.op, ops)
			}
			f.mu.Lock()
			held := f.leases["svc.rel"].held
			f.mu.Unlock()
			if held {
				t.Fatal("the lease is still held")
			}
			connectedOn(t, b)
			_ = b.ws.CloseNow()
			if got := claimed(resumeOn(t, f.socket(t, 2), 1)); len(got) != 0 {
				t.Fatalf("the next resume claims %v, want nothing", got)
			}
		})
	}
}

// TestSessionReleaseLostOnTheResume: a release whose socket dropped before
// the answer, and whose holding the resume then reports lost (another
// holder took the lease), ends with ErrLost and is not sent again.
func TestSessionReleaseLostOnTheResume(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	if _, err := s.Acquire(t.Context(), "svc.lost", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	f.dropOnRelease.Store(true)
	f.stallResumes.Store(true)
	type answer struct {
		l   client.Lease
		err error
	}
	done := make(chan answer, 1)
	go func() {
		l, err := s.ReleaseWith(t.Context(), "svc.lost", client.ReleaseRequest{Holder: "agent-a", FencingToken: 1})
		done <- answer{l, err}
	}()
	b := f.socket(t, 1)
	resumeOn(t, b, 1)
	f.mu.Lock()
	f.leases["svc.lost"] = &fakeHolding{holder: "agent-b", token: 2, held: true} // taken meanwhile
	f.mu.Unlock()
	f.stallResumes.Store(false)
	f.answerStalled()
	a := <-done
	if !errors.Is(a.err, client.ErrLost) {
		t.Fatalf("release: %+v, %v; want ErrLost", a.l, a.err)
	}
	connectedOn(t, b)
	if n := len(b.messages("release")); n != 0 {
		t.Fatalf("%d releases on the resumed socket, want none", n)
	}
}

// TestSessionReleaseAnsweredOnARetiredSocketGoesAgain: a release answered
// on a socket after a resume went out elsewhere settles nothing: that
// resume listed the holding, and the new owner took it back (it had ended
// while nobody acquired since). The release goes again through the
// resumed socket, and the caller gets an answer only once the lease is
// free.
func TestSessionReleaseAnsweredOnARetiredSocketGoesAgain(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	logs := &syncBuffer{}
	_, s := openSessionWith(t, f, client.Config{}, client.SessionConfig{Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if _, err := s.Acquire(t.Context(), "svc.late", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	a := f.socket(t, 0)
	f.holdReleases.Store(true)
	f.stallResumes.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := s.ReleaseWith(t.Context(), "svc.late", client.ReleaseRequest{Holder: "agent-a", FencingToken: 1})
		done <- err
	}()
	f.await(t, "the release on the first socket", func() bool { return a.count("release") == 1 })
	a.send(map[string]any{"type": "move", "reason": "shutdown"})
	b := f.socket(t, 1)
	if got := claimed(resumeOn(t, b, 1)); strings.Join(got, ",") != "svc.late" {
		t.Fatalf("the resume claims %v, want svc.late", got)
	}
	// The first socket answers the release now; then the resume is done
	// (it takes the ended holding back) and answered.
	f.holdReleases.Store(false)
	f.flush()
	waitFor(t, "the release's answer read", func() bool {
		return len(done) > 0 || strings.Contains(logs.String(), "release was answered on a socket a resume replaced")
	})
	f.stallResumes.Store(false)
	f.answerStalled()
	if err := <-done; err != nil {
		t.Fatalf("release: %v", err)
	}
	f.mu.Lock()
	held := f.leases["svc.late"].held
	f.mu.Unlock()
	if held {
		t.Fatal("the lease is held again when the release returns: the resume took it back and nothing released it")
	}
	if n := len(b.messages("release")); n != 1 {
		t.Fatalf("%d releases on the resumed socket, want 1", n)
	}
}

// TestSessionReleaseGivenUpIsForgotten: a release left unanswered (its
// socket dropped) while no socket can be had returns a clear error when
// its ctx ends, and forgets the holding: the next resume does not claim it
// (the holding would be held through the session with nobody leading or
// releasing it).
func TestSessionReleaseGivenUpIsForgotten(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	_, s := openSession(t, f, clock)
	if _, err := s.Acquire(t.Context(), "svc.gone", client.AcquireRequest{Holder: "agent-a"}); err != nil {
		t.Fatal(err)
	}
	a := f.socket(t, 0)
	f.status.Store(503) // no new socket for now
	f.dropOnRelease.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.ReleaseWith(ctx, "svc.gone", client.ReleaseRequest{Holder: "agent-a", FencingToken: 1})
		done <- err
	}()
	f.await(t, "the socket dropped after the release", func() bool { return a.closed && a.count("release") == 1 })
	waitFor(t, "the reconnection's backoff", func() bool { return clock.Timers() == 2 })
	select {
	case err := <-done:
		t.Fatalf("release returned %v while the session reconnects, before its ctx ended", err)
	default:
	}
	cancel()
	err := <-done
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "forgotten") {
		t.Fatalf("release: %v; want ErrUnavailable saying the holding is forgotten", err)
	}
	f.status.Store(0)
	clock.Advance(client.DefaultBackoff.Max)
	if got := claimed(resumeOn(t, f.socket(t, 1), 1)); len(got) != 0 {
		t.Fatalf("the resume claims %v, want nothing", got)
	}
}

// TestFakeSessionsRefuseAsTheService: the fake refuses resumes as the
// service does (docs/contract.md §14): a resume without an epoch, and a
// leasesvc.session.v1 resume, are 400 invalid_argument; one at or below
// the session's epoch is 409 session_conflict naming that epoch; a higher
// one is resumed at exactly the epoch it proposes.
func TestFakeSessionsRefuseAsTheService(t *testing.T) {
	f := newFakeSessions(t)
	srv := newSessionService(t)
	for name, url := range map[string]string{"fake": f.URL, "service": srv.URL} {
		t.Run(name, func(t *testing.T) {
			// ask sends m on a new socket of proto and returns the answer.
			ask := func(proto string, m map[string]any) map[string]any {
				t.Helper()
				ws, _, err := websocket.Dial(t.Context(), url+"/v1/sessions:connect", &websocket.DialOptions{Subprotocols: []string{proto}})
				if err != nil {
					t.Fatal(err)
				}
				defer ws.CloseNow()
				m["id"] = 1
				if err := wsjson.Write(t.Context(), ws, m); err != nil {
					t.Fatal(err)
				}
				var a map[string]any
				if err := wsjson.Read(t.Context(), ws, &a); err != nil {
					t.Fatal(err)
				}
				return a
			}
			opened := ask("leasesvc.session.v2", map[string]any{"type": "open", "windowMs": 1000})
			sid, _ := opened["sessionId"].(string)
			if opened["type"] != "opened" || opened["epoch"] != 1.0 {
				t.Fatalf("open: %v, want opened at epoch 1", opened)
			}
			for _, tc := range []struct {
				proto string
				epoch any // nil: none
				code  string
				named float64 // the epoch a conflict names
			}{
				{"leasesvc.session.v2", nil, "invalid_argument", 0},
				{"leasesvc.session.v1", 2, "invalid_argument", 0},
				{"leasesvc.session.v2", 1, "session_conflict", 1},
				{"leasesvc.session.v2", 3, "", 0},
				{"leasesvc.session.v2", 2, "session_conflict", 3},
			} {
				m := map[string]any{"type": "resume", "sessionId": sid, "leases": []any{}}
				if tc.epoch != nil {
					m["epoch"] = tc.epoch
				}
				a := ask(tc.proto, m)
				p, _ := a["problem"].(map[string]any)
				switch {
				case tc.code == "" && (a["type"] != "resumed" || a["epoch"] != 3.0):
					t.Fatalf("%s resume at %v: %v, want resumed at that epoch", tc.proto, tc.epoch, a)
				case tc.code != "" && (a["type"] != "error" || p["code"] != tc.code):
					t.Fatalf("%s resume at %v: %v, want %s", tc.proto, tc.epoch, a, tc.code)
				case tc.named != 0 && p["epoch"] != tc.named:
					t.Fatalf("%s resume at %v: %v, want the conflict to name epoch %v", tc.proto, tc.epoch, a, tc.named)
				}
			}
		})
	}
}
