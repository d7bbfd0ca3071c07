package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
	"github.com/leasesvc/leasesvc/session"
)

// The tests of this file check the SDKs' lifecycle rules L1–L4
// (sdk/conformance/PROTOCOL.md) in the Go SDK.

// socketCount returns how many sockets the fake accepted.
func (f *fakeSessions) socketCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sockets)
}

// closedWithin fails the test unless ch closes within 10s (real time).
func closedWithin(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10s", what)
	}
}

// TestKeeperModeReasons (L1): the mode is chosen once, at NewKeeper, with a
// typed reason, told to OnMode once before NewKeeper returns.
func TestKeeperModeReasons(t *testing.T) {
	plainSvc := newService(t, nil) // no sessions: 404 at the upgrade
	sessions := newFakeSessions(t)
	for _, tc := range []struct {
		name   string
		url    string
		cfg    client.KeeperConfig
		mode   string
		reason client.PlainReason
	}{
		{"asked", sessions.URL, client.KeeperConfig{PlainRenewals: true}, client.ModePlain, client.PlainAsked},
		{"sessions_unsupported", plainSvc.URL, client.KeeperConfig{}, client.ModePlain, client.PlainSessionsUnsupported},
		{"window", sessions.URL, client.KeeperConfig{Window: time.Second, CancelBefore: 400 * time.Millisecond}, client.ModePlain, client.PlainWindow},
		{"session", sessions.URL, client.KeeperConfig{Window: time.Second, CancelBefore: 399 * time.Millisecond}, client.ModeSession, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(tc.url, client.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var told []client.KeeperMode
			tc.cfg.OnMode = func(m client.KeeperMode) { told = append(told, m) }
			k, err := client.NewKeeper(t.Context(), c, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			m := k.ModeInfo()
			if k.Mode() != tc.mode || m.Mode != tc.mode || m.Reason != tc.reason || k.PlainReason() != string(tc.reason) {
				t.Fatalf("Mode %q PlainReason %q ModeInfo %+v, want %q %q", k.Mode(), k.PlainReason(), m, tc.mode, tc.reason)
			}
			if len(told) != 1 || told[0] != m {
				t.Fatalf("OnMode told %+v, want once %+v", told, m)
			}
		})
	}
}

// TestKeeperSessionLimitRemembered (L1): a Keeper refused its session at
// the session limit holds with plain renewals, reason "session_limit", for
// its life: its next Hold is plain too, though the limit has room again.
func TestKeeperSessionLimitRemembered(t *testing.T) {
	srv, _ := newTestService(t, testService{sessions: &session.Config{MaxSessions: 1}})
	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.OpenSession(t.Context(), client.SessionConfig{}) // the instance's only session
	if err != nil {
		t.Fatal(err)
	}
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if k.Mode() != "plain" || k.PlainReason() != "session_limit" || !errors.Is(k.ModeInfo().Cause, client.ErrSessionLimit) {
		t.Fatalf("at the limit: %q %q %v", k.Mode(), k.PlainReason(), k.ModeInfo().Cause)
	}
	if _, err := k.Hold(t.Context(), "svc.limit", client.AcquireRequest{Holder: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	h, err := k.Hold(t.Context(), "svc.limit-2", client.AcquireRequest{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.Get(t.Context(), "svc.limit-2"); err != nil || l.Session || h.TTL() == 0 || k.Mode() != "plain" {
		t.Fatalf("the second hold: %+v, %v (mode %q); want plain renewals, remembered", l, err, k.Mode())
	}
}

// TestKeeperRetryEvent (L1): a session that fails to open is retried, and
// each retry is told to OnRetry as a typed event, not only logged.
func TestKeeperRetryEvent(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	f.status.Store(503)
	c, err := client.New(f.URL, client.Config{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	retries := make(chan client.KeeperRetry, 10)
	type result struct {
		k   *client.Keeper
		err error
	}
	made := make(chan result, 1)
	go func() {
		k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Window: time.Second, Clock: clock,
			OnRetry: func(r client.KeeperRetry) { retries <- r }})
		made <- result{k, err}
	}()
	r := <-retries
	if r.Op != client.RetryOpenSession || r.Attempt != 1 || r.Delay <= 0 || !errors.Is(r.Err, client.ErrUnavailable) {
		t.Fatalf("retry event %+v, want the first open_session retry with ErrUnavailable", r)
	}
	f.status.Store(0)
	waitFor(t, "the retry's timer", func() bool { return clock.Timers() == 1 })
	clock.Advance(r.Delay)
	res := <-made
	if res.err != nil || res.k.Mode() != "session" {
		t.Fatalf("after the retry: %v, %v", res.k, res.err)
	}
	res.k.Close()
}

// TestSessionEndedNeverReopens (L2): a session the service ended (a resume
// refused: session_not_found) ends for good: its holdings end with ErrLost,
// Done and Err say so, it opens no new session itself, and a Keeper given
// it explicitly does not reopen it: its holds fail with the session-closed
// error, its mode still "session".
func TestSessionEndedNeverReopens(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	c, s := openSession(t, f, clock)
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Session: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	h, err := k.Hold(t.Context(), "svc.ended", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	f.refuse.Store(true)
	_ = f.socket(t, 0).ws.CloseNow()
	closedWithin(t, h.Done(), "the holding ended")
	if !errors.Is(h.Err(), client.ErrLost) {
		t.Fatalf("the holding ended with %v, want ErrLost", h.Err())
	}
	closedWithin(t, s.Done(), "the session ended")
	if err := s.Err(); !errors.Is(err, client.ErrSessionEnded) || !errors.Is(err, client.ErrSessionClosed) {
		t.Fatalf("Session.Err %v, want ErrSessionEnded (and ErrSessionClosed)", err)
	}
	if n := f.socketCount(); n != 2 || f.socket(t, 1).messages("open") != nil {
		t.Fatalf("%d sockets after the end (want the first and the refused resume's), the last opened %v", n, f.socket(t, 1).messages("open"))
	}
	if _, err := s.Acquire(t.Context(), "svc.other", client.AcquireRequest{Holder: "agent-a"}); !errors.Is(err, client.ErrSessionClosed) {
		t.Fatalf("acquire on the ended session: %v, want ErrSessionClosed", err)
	}
	if _, err := k.Hold(t.Context(), "svc.ended", client.AcquireRequest{Holder: "agent-a"}); !errors.Is(err, client.ErrSessionClosed) || k.Mode() != "session" {
		t.Fatalf("hold on a Keeper of an explicit ended session: %v (mode %q), want ErrSessionClosed", err, k.Mode())
	}
	if n := f.socketCount(); n != 2 {
		t.Fatalf("%d sockets: something reopened the explicit session", n)
	}
}

// TestKeeperReopensItsOwnSession (L2): the Keeper that opened a session
// the service ended opens a new one of the same window at its next Hold,
// and stays in session mode.
func TestKeeperReopensItsOwnSession(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	c, err := client.New(f.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Window: 2 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	h, err := k.Hold(t.Context(), "svc.own", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	f.refuse.Store(true)
	_ = f.socket(t, 0).ws.CloseNow()
	closedWithin(t, h.Done(), "the holding ended")
	if !errors.Is(h.Err(), client.ErrLost) {
		t.Fatalf("the holding ended with %v, want ErrLost", h.Err())
	}
	h2, err := k.Hold(t.Context(), "svc.own", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	open := f.socket(t, 2).messages("open")
	if len(open) != 1 || open[0]["windowMs"] != 2000.0 || k.Mode() != "session" || h2.TTL() != 0 {
		t.Fatalf("the next hold: opened %v, mode %q; want a new session of window 2s", open, k.Mode())
	}
	select {
	case <-h2.Done():
		t.Fatalf("the new holding ended: %v", h2.Err())
	default:
	}
}

// TestElectorCampaignsAfterTheSessionEnded (L2): an Elector over a Keeper
// whose shared session the service ended stops leading (ErrLost) and
// campaigns again through the new session the Keeper opens; Run does not
// return.
func TestElectorCampaignsAfterTheSessionEnded(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	var rec term
	e, _, _ := sessionElector(t, f, clock, &rec, nil)
	_, _, ctx := rec.get()
	f.refuse.Store(true)
	_ = f.socket(t, 0).ws.CloseNow()
	closedWithin(t, ctx.Done(), "the leading ctx ended")
	if cause := context.Cause(ctx); !errors.Is(cause, client.ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	sock := f.socket(t, 2)
	f.await(t, "a new session opened", func() bool { return sock.count("open") == 1 })
	f.await(t, "the new session's acquire", func() bool { return sock.count("acquire") == 1 })
	waitFor(t, "leading again", func() bool { n, _, _ := rec.get(); return n == 2 && e.IsLeader() })
}

// TestFitCancelBefore (L3): one rule, CancelBefore < SafeSpan − span/2,
// for a window and a TTL alike; a value that does not fit is an error
// wrapping ErrInvalid that names the limit and the span, never capped.
func TestFitCancelBefore(t *testing.T) {
	for _, tc := range []struct {
		span, cb time.Duration
		limit    string // "" when it fits
	}{
		{3 * time.Second, 2 * time.Second, "1.2s"},
		{3 * time.Second, 500 * time.Millisecond, ""},
		{time.Second, 600 * time.Millisecond, "400ms"},
		{time.Second, 400 * time.Millisecond, "400ms"},
		{time.Second, 399 * time.Millisecond, ""},
		{time.Second, 100 * time.Millisecond, ""},
	} {
		err := client.FitCancelBefore(tc.span, 0.1, tc.cb)
		switch {
		case tc.limit == "" && err != nil:
			t.Errorf("FitCancelBefore(%v, 0.1, %v) = %v, want it to fit", tc.span, tc.cb, err)
		case tc.limit != "" && (!errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), tc.limit) ||
			!strings.Contains(err.Error(), tc.span.String()) || !strings.Contains(err.Error(), "CancelBefore")):
			t.Errorf("FitCancelBefore(%v, 0.1, %v) = %v, want ErrInvalid naming CancelBefore, %s and %v", tc.span, tc.cb, err, tc.limit, tc.span)
		}
	}
	if err := client.FitCancelBefore(time.Second, 0.1, -time.Millisecond); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a negative CancelBefore: %v", err)
	}
	if d := client.DefaultCancelBeforeFor(time.Second); d != 100*time.Millisecond {
		t.Errorf("the default for 1s is %v, want 100ms", d)
	}
	if d := client.DefaultCancelBeforeFor(30 * time.Second); d != 250*time.Millisecond {
		t.Errorf("the default for 30s is %v, want 250ms", d)
	}
	if at := client.StopAt(epoch, 2*time.Second); !at.Equal(epoch.Add(-2 * time.Second)) {
		t.Errorf("StopAt = %v", at)
	}
}

// TestElectorCancelBeforeRefused (L3): an Elector whose CancelBefore does
// not fit its Keeper's span is refused by NewElector (the span is known
// then), or for Client.NewElector by Run once its Keeper is built, with
// ErrInvalid; it is never capped.
func TestElectorCancelBeforeRefused(t *testing.T) {
	svc := newService(t, nil) // no sessions: plain renewals
	c := svc.client(t, client.Config{MaxAttempts: 1})
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{PlainRenewals: true, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	var rec term
	cfg := rec.config(client.SystemClock{}, "agent-a")
	cfg.CancelBefore = 2 * time.Second
	if _, err := client.NewElector(k, "svc.cb", cfg); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "1.2s") {
		t.Fatalf("NewElector with CancelBefore 2s over a TTL of 3s: %v, want ErrInvalid naming the limit 1.2s", err)
	}
	cfg.CancelBefore = 20 * time.Second // above the limit for the default TTL (30s) too
	e, err := c.NewElector("svc.cb", cfg)
	if err != nil {
		t.Fatalf("Client.NewElector checks CancelBefore at Run: %v", err)
	}
	if err := e.Run(t.Context()); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "CancelBefore") {
		t.Fatalf("Run = %v, want ErrInvalid naming CancelBefore", err)
	}
	if svc.acquires.Load() != 0 {
		t.Fatalf("%d acquires sent by a refused Elector", svc.acquires.Load())
	}
}

// TestKeeperCloseReleasesAndStops (L4): Close releases every holding the
// Keeper still holds, ends them, stops their renewals, and refuses more.
func TestKeeperCloseReleasesAndStops(t *testing.T) { synctest.Test(t, keeperCloseReleasesAndStops) }

func keeperCloseReleasesAndStops(t *testing.T) {
	k, s, c := bubbleKeeper(t)
	var hs []client.Holding
	for _, name := range []string{"svc.close-a", "svc.close-b"} {
		h, err := k.Hold(t.Context(), name, client.AcquireRequest{Holder: "agent-a"})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	advance(time.Minute) // renewed meanwhile: two renewals each in 30s, so at least 10 in all
	if n := s.renews.Load(); n < 10 {
		t.Fatalf("%d renews in a minute, want the Keeper's", n)
	}
	k.Close()
	for _, h := range hs {
		select {
		case <-h.Done():
		default:
			t.Fatalf("%s not ended by Close", h.Name())
		}
		if l, err := c.Get(t.Context(), h.Name()); err != nil || l.Held {
			t.Fatalf("%s after Close: %+v, %v; want released", h.Name(), l, err)
		}
	}
	renews := s.renews.Load()
	advance(2 * time.Minute)
	if n := s.renews.Load(); n != renews {
		t.Fatalf("%d renews after Close", n-renews)
	}
	if _, err := k.Hold(t.Context(), "svc.close-c", client.AcquireRequest{Holder: "agent-a"}); !errors.Is(err, client.ErrKeeperClosed) {
		t.Fatalf("Hold after Close: %v, want ErrKeeperClosed", err)
	}
}

// TestKeeperCloseWhenTheReleaseFails (L4): a holding whose release fails
// at Close ends all the same (ErrKeeperClosed) within ReleaseTimeout, and
// is renewed no more.
func TestKeeperCloseWhenTheReleaseFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k, s, _ := bubbleKeeper(t)
		h, err := k.Hold(t.Context(), "svc.close", client.AcquireRequest{Holder: "agent-a"})
		if err != nil {
			t.Fatal(err)
		}
		s.set(unavailable)
		start := time.Now()
		k.Close()
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Close took %v, more than ReleaseTimeout", d)
		}
		<-h.Done()
		if !errors.Is(h.Err(), client.ErrKeeperClosed) {
			t.Fatalf("Err %v, want ErrKeeperClosed", h.Err())
		}
		renews := s.renews.Load()
		advance(time.Minute)
		if n := s.renews.Load(); n != renews {
			t.Fatalf("%d renews after Close", n-renews)
		}
	})
}

// TestKeeperRenewsWhatItHandsOut (L4): a holding is renewed by its Keeper
// from the moment it is handed out, whatever verb handed it out (Acquire
// is Hold), and each failed renewal is told to OnRetry.
func TestKeeperRenewsWhatItHandsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServiceHandler(t, nil)
		var mu sync.Mutex
		var retries []client.KeeperRetry
		k, err := client.NewKeeper(t.Context(), s.bubbleClient(t), client.KeeperConfig{PlainRenewals: true, TTL: 3 * time.Second,
			OnRetry: func(r client.KeeperRetry) { mu.Lock(); retries = append(retries, r); mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		h, err := k.Acquire(t.Context(), "svc.renewed", client.AcquireRequest{Holder: "agent-a"})
		if err != nil {
			t.Fatal(err)
		}
		advance(9 * time.Second) // three TTLs
		if n := s.renews.Load(); n < 9 {
			t.Fatalf("%d renews in 3 TTLs, want every TTL/3", n)
		}
		select {
		case <-h.Done():
			t.Fatalf("ended: %v", h.Err())
		default:
		}
		s.set(unavailable)
		<-h.Done()
		mu.Lock()
		defer mu.Unlock()
		if len(retries) < 2 || retries[0].Op != client.RetryRenew || retries[0].Lease != "svc.renewed" || retries[0].Token != 1 ||
			retries[1].Attempt != 2 || !errors.Is(retries[0].Err, client.ErrUnavailable) {
			t.Fatalf("retry events %+v, want the renew's", retries)
		}
	})
}

// TestKeeperCloseLeavesTheSharedSession (L4): a Keeper on the Client's
// shared session releases its own holdings at Close, and leaves the
// session (and another Keeper's holding) alone while another Keeper uses
// it; the last Keeper's Close closes it.
func TestKeeperCloseLeavesTheSharedSession(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	c, err := client.New(f.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ks []*client.Keeper
	var hs []client.Holding
	for i, name := range []string{"svc.shared-a", "svc.shared-b"} {
		k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		h, err := k.Hold(t.Context(), name, client.AcquireRequest{Holder: "agent-" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		ks, hs = append(ks, k), append(hs, h)
	}
	sock := f.socket(t, 0)
	ks[0].Close()
	closedWithin(t, hs[0].Done(), "the first holding ended")
	if rl := sock.messages("release"); len(rl) != 1 || rl[0]["name"] != "svc.shared-a" || sock.messages("close") != nil {
		t.Fatalf("releases %v, closes %v; want the first Keeper's holding released, the session kept", rl, sock.messages("close"))
	}
	select {
	case <-hs[1].Done():
		t.Fatalf("the other Keeper's holding ended: %v", hs[1].Err())
	default:
	}
	ks[1].Close()
	f.await(t, "the shared session closed", func() bool { return sock.count("close") == 1 })
}
