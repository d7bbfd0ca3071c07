package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// bubbleKeeper returns a Keeper of plain renewals (TTL 30s) on the real
// lease API in-process, on the bubble's clock; call it inside
// synctest.Test.
func bubbleKeeper(t *testing.T) (*client.Keeper, *service, *client.Client) {
	t.Helper()
	s := newServiceHandler(t, nil)
	c := s.bubbleClient(t)
	k, err := client.NewKeeper(t.Context(), c, client.KeeperConfig{PlainRenewals: true, TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k, s, c
}

// TestKeeperHoldPlain: a plain holding's deadline is the send time of the
// last successful acquire or renew + TTL × (1 − DriftMargin); the Keeper
// renews it every RenewInterval (TTL/3, less up to RenewJitter of it),
// moving the deadline (Changed), and a renew answered lease_lost ends it
// (Done, Err matches ErrLost).
func TestKeeperHoldPlain(t *testing.T) { synctest.Test(t, keeperHoldPlain) }

func keeperHoldPlain(t *testing.T) {
	k, s, _ := bubbleKeeper(t)
	if k.Mode() != "plain" || k.Span() != 30*time.Second || k.Window() != 0 {
		t.Fatalf("Mode %q Span %v Window %v", k.Mode(), k.Span(), k.Window())
	}
	start := time.Now()
	h, err := k.Hold(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := start.Add(27 * time.Second); !h.Deadline().Equal(want) || h.Token() != 1 || h.TTL() != 30*time.Second {
		t.Fatalf("deadline %v token %d TTL %v, want %v, 1 and 30s", h.Deadline(), h.Token(), h.TTL(), want)
	}
	last := start
	for i := 1; i <= 2; i++ {
		<-h.Changed() // the bubble's clock runs to the next renewal
		if since := time.Since(last); since > 10*time.Second || since < 9*time.Second {
			t.Fatalf("renewal %d came %v after the last, want TTL/3 less up to 10%%", i, since)
		}
		last = time.Now()
		if want := last.Add(27 * time.Second); !h.Deadline().Equal(want) {
			t.Fatalf("after renewal %d the deadline is %v, want %v", i, h.Deadline(), want)
		}
	}
	if err := h.Err(); err != nil {
		t.Fatalf("Err of a live holding: %v", err)
	}
	s.set(lost)
	<-h.Done()
	if since := time.Since(last); since > 10*time.Second || since < 9*time.Second || !errors.Is(h.Err(), client.ErrLost) {
		t.Fatalf("ended %v after the last renewal with %v, want at the third renewal with ErrLost", since, h.Err())
	}
}

// TestKeeperHoldPlainRunsOut: while every renew fails, the holding ends
// at its deadline, not before, with an error that matches ErrLost.
func TestKeeperHoldPlainRunsOut(t *testing.T) { synctest.Test(t, keeperHoldPlainRunsOut) }

func keeperHoldPlainRunsOut(t *testing.T) {
	k, s, _ := bubbleKeeper(t)
	h, err := k.Hold(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-a"})
	if err != nil {
		t.Fatal(err)
	}
	s.set(unavailable)
	deadline := h.Deadline()
	<-h.Done()
	if !time.Now().Equal(deadline) || !errors.Is(h.Err(), client.ErrLost) {
		t.Fatalf("ended at %v with %v, want at its deadline %v with ErrLost", time.Now(), h.Err(), deadline)
	}
	if n := s.renews.Load(); n < 3 {
		t.Fatalf("%d renews tried before the deadline, want the retries", n)
	}
}

// TestKeeperReleaseAndTransfer: a renew through the holding writes its
// checkpoint; a release writes one and ends the holding with no error; a
// transfer hands it over.
func TestKeeperReleaseAndTransfer(t *testing.T) { synctest.Test(t, keeperReleaseAndTransfer) }

func keeperReleaseAndTransfer(t *testing.T) {
	k, _, c := bubbleKeeper(t)
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
	<-h.Done()
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
	<-h.Done()
	if l, err := c.Acquire(t.Context(), "svc.keeper", client.AcquireRequest{Holder: "agent-b", TTL: time.Minute}); err != nil || l.FencingToken != 3 {
		t.Fatalf("the successor's acquire: %+v, %v", l, err)
	}
}

// TestKeeperWindowFallsBack: a Keeper whose CancelBefore does not fit the
// window of the session it would open holds by plain renewals, reason
// "window" (rule L1), and tells OnMode so, once, before NewKeeper returns.
func TestKeeperWindowFallsBack(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	var modes []client.KeeperMode
	// The shared session's window is 1s: 500ms is not below 0.9s − 0.5s.
	k, err := client.NewKeeper(context.Background(), c, client.KeeperConfig{CancelBefore: 500 * time.Millisecond,
		OnMode: func(m client.KeeperMode) { modes = append(modes, m) }})
	if err != nil || k.Mode() != "plain" || k.PlainReason() != "window" {
		t.Fatalf("NewKeeper with a window that does not fit: %v, %v", k, err)
	}
	defer k.Close()
	if len(modes) != 1 || modes[0] != k.ModeInfo() || !errors.Is(modes[0].Cause, client.ErrInvalid) || modes[0].Span != client.DefaultTTL {
		t.Fatalf("OnMode was told %+v, want once %+v with a cause matching ErrInvalid", modes, k.ModeInfo())
	}
}
