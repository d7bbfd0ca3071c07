package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// TestSessionLostBeforeItsResultIsNotLed: an instance that queues a lost
// for a holding before the result that answers its acquire (lost L/1,
// result L/1, then acks) has L out of its table: the acquire fails with
// ErrLost and nothing leads L (docs/contract.md §14, A5).
func TestSessionLostBeforeItsResultIsNotLed(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	c, s := openSession(t, f, clock)
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Session: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	sock := f.socket(t, 0)
	waitFor(t, "the first heartbeat acknowledged", func() bool { return !s.Deadline().IsZero() })
	f.holdAcquires.Store(true)
	type answer struct {
		h   client.Holding
		err error
	}
	done := make(chan answer, 1)
	go func() {
		h, err := k.Acquire(t.Context(), "svc.a", client.AcquireRequest{Holder: "agent-a"})
		done <- answer{h, err}
	}()
	f.await(t, "the acquire", func() bool { return sock.count("acquire") == 1 })
	sock.send(map[string]any{"type": "lost", "name": "svc.a", "fencingToken": 1, "reason": "taken"})
	f.holdAcquires.Store(false)
	f.flush()
	a := <-done
	if !errors.Is(a.err, client.ErrLost) {
		lead := "none"
		if a.h != nil {
			lead = a.h.Deadline().Sub(epoch).String()
		}
		t.Fatalf("acquire answered after its lost: err %v, holding deadline +%s; want ErrLost and no holding", a.err, lead)
	}
	// The memory of that lost ends with its acquire: the next one is led.
	h, err := k.Acquire(t.Context(), "svc.a", client.AcquireRequest{Holder: "agent-a"})
	if err != nil || h.Token() != 1 {
		t.Fatalf("acquire again: %v, %v", h, err)
	}
}

// TestSessionLateResultIsLedOnlyByItsOwnWrite: an acquire answered long
// after it was sent, while acks kept coming for the session's other
// leases, is led until the acquire's send time + the session lease TTL ×
// (1 − DriftMargin) at most, until an ack arrives after its answer
// (docs/contract.md §14, A4).
func TestSessionLateResultIsLedOnlyByItsOwnWrite(t *testing.T) {
	clock := fakeclock.New(epoch)
	f := newFakeSessions(t)
	c, s := openSession(t, f, clock)
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{Session: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	sock := f.socket(t, 0)
	waitFor(t, "the first heartbeat acknowledged", func() bool { return !s.Deadline().IsZero() })
	waitFor(t, "the next heartbeat scheduled", func() bool { return clock.Timers() == 1 })
	f.holdAcquires.Store(true)
	done := make(chan client.Holding, 1)
	go func() {
		h, err := k.Acquire(t.Context(), "svc.a", client.AcquireRequest{Holder: "agent-a"})
		if err != nil {
			t.Error(err)
		}
		done <- h
	}()
	f.await(t, "the acquire", func() bool { return sock.count("acquire") == 1 })
	// 28s later (the fake's lease TTL is 30s: 27s safe), a heartbeat is
	// acked; then the acquire's answer comes.
	clock.Advance(28 * time.Second)
	f.await(t, "a heartbeat after 28s", func() bool { return sock.count("heartbeat") == 2 })
	waitFor(t, "its ack", func() bool { return s.Deadline().After(epoch.Add(28 * time.Second)) })
	f.holdAcquires.Store(false)
	f.flush()
	h := <-done
	if h == nil {
		return
	}
	if d, limit := h.Deadline(), epoch.Add(27*time.Second); d.After(limit) {
		t.Fatalf("the late holding is led until +%v, past its acquire's send + 27s", d.Sub(epoch))
	}
	// The next ack arrives after the answer: it vouches for the holding.
	waitFor(t, "the next heartbeat scheduled", func() bool { return clock.Timers() == 1 })
	clock.Advance(250 * time.Millisecond)
	f.await(t, "the next heartbeat", func() bool { return sock.count("heartbeat") == 3 })
	waitFor(t, "the holding led by the acks again", func() bool { return h.Deadline().After(clock.Now()) })
}
