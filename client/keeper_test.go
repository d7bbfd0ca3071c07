package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/client/internal/fakeclock"
)

// await waits (on the wall clock, at most 10s) for ch to close.
func await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// armed waits until the fake clock has a timer due at at.
func armed(t *testing.T, clock *fakeclock.Clock, at time.Time) {
	t.Helper()
	for {
		changed := clock.Changed()
		if next, ok := clock.Next(); ok && next.Equal(at) {
			return
		}
		await(t, "a timer at "+at.String(), changed)
	}
}

// plainKeeper returns a Keeper of plain renewals (TTL 30s) on a service and
// clock of its own.
func plainKeeper(t *testing.T) (*client.Keeper, *service, *fakeclock.Clock) {
	t.Helper()
	clock := fakeclock.New(epoch)
	s := newService(t, clock)
	k, err := client.NewKeeper(t.Context(), s.client(t, client.Config{MaxAttempts: 1}),
		client.KeeperConfig{PlainRenewals: true, TTL: 30 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k, s, clock
}

// TestKeeperHoldPlain: a plain holding's deadline is the send time of the
// last successful acquire or renew + TTL × (1 − DriftMargin); Hold renews
// it every TTL/3, moving the deadline (Changed), and a renew answered
// lease_lost ends it (Done, Err matches ErrLost).
func TestKeeperHoldPlain(t *testing.T) {
	k, s, clock := plainKeeper(t)
	if k.Mode() != "plain" || k.Span() != 30*time.Second || k.Window() != 0 {
		t.Fatalf("Mode %q Span %v Window %v", k.Mode(), k.Span(), k.Window())
	}
	h, err := k.Hold(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := epoch.Add(27 * time.Second); !h.Deadline().Equal(want) || h.Token() != 1 {
		t.Fatalf("deadline %v token %d, want %v and 1", h.Deadline(), h.Token(), want)
	}
	for i := 1; i <= 2; i++ {
		changed := h.Changed()
		armed(t, clock, epoch.Add(time.Duration(i)*10*time.Second))
		clock.Advance(10 * time.Second)
		await(t, "the deadline to move", changed)
		if want := epoch.Add(time.Duration(i)*10*time.Second + 27*time.Second); !h.Deadline().Equal(want) {
			t.Fatalf("after renewal %d the deadline is %v, want %v", i, h.Deadline(), want)
		}
	}
	if err := h.Err(); err != nil {
		t.Fatalf("Err of a live holding: %v", err)
	}
	s.set(lost)
	armed(t, clock, epoch.Add(30*time.Second))
	clock.Advance(10 * time.Second)
	await(t, "the loss", h.Done())
	if !errors.Is(h.Err(), client.ErrLost) {
		t.Fatalf("Err %v, want ErrLost", h.Err())
	}
}

// TestKeeperHoldPlainRunsOut: while every renew fails, the holding ends
// at its deadline, not before, with an error that matches ErrLost.
func TestKeeperHoldPlainRunsOut(t *testing.T) {
	k, s, clock := plainKeeper(t)
	h, err := k.Hold(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	s.set(unavailable)
	deadline := h.Deadline()
	for {
		select {
		case <-h.Done():
			if clock.Now().Before(deadline) {
				t.Fatalf("ended at %v, before its deadline %v", clock.Now(), deadline)
			}
			if !errors.Is(h.Err(), client.ErrLost) {
				t.Fatalf("Err %v, want ErrLost", h.Err())
			}
			return
		default:
		}
		changed := clock.Changed()
		next, ok := clock.Next()
		if !ok {
			select { // the renew in flight fails, and a timer is set or the holding ends
			case <-changed:
			case <-h.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("timed out waiting for a timer or the end")
			}
			continue
		}
		if next.After(deadline) {
			t.Fatalf("a timer at %v, after the deadline %v, and the holding still lives", next, deadline)
		}
		clock.Advance(next.Sub(clock.Now()))
		await(t, "the next timer", changed)
	}
}

// TestKeeperReleaseAndTransfer: a release through the holding writes its
// checkpoint and ends the holding with no error; a transfer hands it over.
func TestKeeperReleaseAndTransfer(t *testing.T) {
	k, s, _ := plainKeeper(t)
	c := s.client(t, client.Config{})
	h, err := k.Hold(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.Renew(t.Context(), client.RenewRequest{Checkpoint: json.RawMessage(`{"n":1}`)})
	if err != nil || string(r.Checkpoint) != `{"n":1}` || r.FencingToken != 1 {
		t.Fatalf("renew with a checkpoint: %+v, %v", r, err)
	}
	if _, err := h.Release(t.Context(), json.RawMessage(`{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	await(t, "the holding to end", h.Done())
	if h.Err() != nil {
		t.Fatalf("Err after a release: %v", h.Err())
	}
	if l, err := c.Get(t.Context(), "svc.keeper"); err != nil || l.Held || string(l.Checkpoint) != `{"n":2}` {
		t.Fatalf("after the release: %+v, %v", l, err)
	}
	h, err = k.Hold(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-a"})
	if err != nil || h.Token() != 2 || string(h.Lease().Checkpoint) != `{"n":2}` {
		t.Fatalf("hold again: %v, %v", h, err)
	}
	if _, err := h.Transfer(t.Context(), client.TransferRequest{To: "agent-b"}); err != nil {
		t.Fatal(err)
	}
	await(t, "the holding to end", h.Done())
	if l, err := c.Acquire(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-b", TTL: time.Minute}); err != nil || l.FencingToken != 3 {
		t.Fatalf("the successor's acquire: %+v, %v", l, err)
	}
}

// TestKeeperFitsFallsBack: a Keeper whose Fits refuses the window of the
// session it would open holds by plain renewals.
func TestKeeperFitsFallsBack(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	no := func(time.Duration) error { return errors.New("no room") }
	k, err := client.NewKeeper(context.Background(), c, client.KeeperConfig{Fits: no})
	if err != nil || k.Mode() != "plain" {
		t.Fatalf("NewKeeper with a window that does not fit: %v, %v", k, err)
	}
	k.Close()
}
