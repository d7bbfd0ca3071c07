package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"
)

// stillClock is a Clock whose time stands still and whose timers never
// fire: the term tests below drive the term's events by hand.
type stillClock struct{ now time.Time }

func (c stillClock) Now() time.Time                 { return c.now }
func (c stillClock) NewTimer(d time.Duration) Timer { return &stillTimer{d: d} }

// stillTimer records the duration it was last armed with.
type stillTimer struct{ d time.Duration }

func (t *stillTimer) C() <-chan time.Time        { return nil }
func (t *stillTimer) Stop() bool                 { return true }
func (t *stillTimer) Reset(d time.Duration) bool { t.d = d; return true }

// termEnd is what a term told its Elector when it ended the leading ctx.
type termEnd struct{ cause, over error }

// newTestTerm returns an armed term of token 7, sent at the clock's time,
// and the record of its ends and reported safe deadlines.
func newTestTerm(t *testing.T) (*term, *[]termEnd, *[]time.Time) {
	t.Helper()
	c, err := New("http://127.0.0.1:1", Config{})
	if err != nil {
		t.Fatal(err)
	}
	clock := stillClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var deadlines []time.Time
	k, err := NewKeeper(t.Context(), c, KeeperConfig{PlainRenewals: true, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewElector(k, "svc.term", ElectorConfig{
		Holder: "agent-a",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Callbacks: LeaderCallbacks{
			OnStartedLeading: func(context.Context) {},
			OnSafeDeadline:   func(d time.Time) { deadlines = append(deadlines, d) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &plainHolding{holdingBase: holdingBase{k: k, name: "svc.term", token: 7, lease: Lease{Name: "svc.term", Holder: "agent-a", FencingToken: 7}},
		ttl: DefaultTTL, sent: clock.now, changed: make(chan struct{}), done: make(chan struct{}), yield: make(chan string, 1)}
	var ends []termEnd
	tm := newTerm(t.Context(), e.termConfig(), h, func(cause, over error) { ends = append(ends, termEnd{cause, over}) })
	tm.arm()
	t.Cleanup(tm.close)
	return tm, &ends, &deadlines
}

// TestTermPhases: the term's phase and what it tells the Elector after
// each kind of answer (docs/contract.md §2, §8).
func TestTermPhases(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	transient := errors.New("connection refused")
	for _, tc := range []struct {
		name    string
		events  func(tm *term)
		phase   termPhase
		cause   error // nil: the leading ctx was not ended
		renewed bool  // the last renew result moved the deadline
	}{
		{name: "renewed", phase: termRenewing, renewed: true, events: func(tm *term) {
			tm.inFlight = true
			tm.h.(*plainHolding).confirm(start.Add(10*time.Second), Lease{}) // the Holding moves its deadline
			tm.results <- renewResult{sent: start.Add(10 * time.Second)}
		}},
		{name: "a failed renew retries", phase: termRenewing, events: func(tm *term) {
			tm.results <- renewResult{err: transient, sent: start}
		}},
		{name: "lease_lost", phase: termGone, cause: ErrLost, events: func(tm *term) {
			tm.results <- renewResult{err: fmt.Errorf("renew: %w", ErrLost), sent: start}
		}},
		{name: "refused for good", phase: termStopped, cause: ErrDenied, events: func(tm *term) {
			tm.results <- renewResult{err: fmt.Errorf("renew: %w", ErrDenied), sent: start}
		}},
		{name: "safe deadline", phase: termStopped, cause: ErrSafeDeadline, events: func(tm *term) {
			tm.results <- renewResult{err: transient, sent: start}
			tm.onRenewResult(<-tm.results)
			tm.cfg.clock = stillClock{now: tm.stopAt} // the deadline's timer fires
			tm.onDeadline()
		}},
		{name: "a deadline that moved meanwhile does not end it", phase: termRenewing, events: func(tm *term) {
			tm.h.(*plainHolding).confirm(start.Add(time.Second), Lease{})
			tm.cfg.clock = stillClock{now: tm.stopAt} // the old deadline's timer fires
			tm.onDeadline()
		}},
		{name: "a renew after the loss changes nothing", phase: termGone, cause: ErrLost, events: func(tm *term) {
			tm.results <- renewResult{err: ErrLost, sent: start}
			tm.onRenewResult(<-tm.results)
			tm.onDeadline()
			tm.results <- renewResult{sent: start.Add(time.Second)}
		}},
		{name: "transferred", phase: termGone, cause: ErrTransferred, events: func(tm *term) {
			tm.transfer = &termReq{to: "agent-b", done: make(chan error, 1)}
			tm.onTransferDone(nil)
		}},
		{name: "a failed transfer goes on", phase: termRenewing, events: func(tm *term) {
			tm.transfer = &termReq{to: "agent-b", done: make(chan error, 1)}
			tm.onTransferDone(transient)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm, ends, deadlines := newTestTerm(t)
			if tm.phase != termRenewing {
				t.Fatalf("a new term is %v", tm.phase)
			}
			tc.events(tm)
			renewed := false
			select {
			case r := <-tm.results:
				_, renewed = tm.onRenewResult(r)
			default:
			}
			if tm.phase != tc.phase {
				t.Fatalf("phase %v, want %v", tm.phase, tc.phase)
			}
			if renewed != tc.renewed {
				t.Fatalf("renewed %v, want %v", renewed, tc.renewed)
			}
			switch {
			case tc.cause == nil && len(*ends) != 0:
				t.Fatalf("the leading ctx was ended: %v", *ends)
			case tc.cause != nil && (len(*ends) != 1 || !errors.Is((*ends)[0].cause, tc.cause) || !errors.Is((*ends)[0].over, tc.cause)):
				t.Fatalf("ends %v, want one with cause and over %v", *ends, tc.cause)
			}
			if tc.renewed {
				// Sent 10s in: 27s later (TTL 30s, drift margin 10%).
				if want := start.Add(37 * time.Second); len(*deadlines) != 1 || !(*deadlines)[0].Equal(want) {
					t.Fatalf("deadlines %v, want [%v]", *deadlines, want)
				}
				if want := 37*time.Second - tm.cfg.cancelBefore; tm.stop.(*stillTimer).d != want {
					t.Fatalf("safe deadline timer armed for %v, want %v (less CancelBefore)", tm.stop.(*stillTimer).d, want)
				}
			}
			if tc.phase != termRenewing {
				// A term that no longer renews takes no checkpoint writes.
				r := termReq{done: make(chan error, 1)}
				tm.onRequest(r)
				if err := <-r.done; !errors.Is(err, ErrNotLeading) {
					t.Fatalf("a checkpoint write answered %v, want ErrNotLeading", err)
				}
			}
		})
	}
}
