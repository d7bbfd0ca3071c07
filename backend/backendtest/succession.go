package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// instances returns n Managers over the store, as n service instances see
// it: each one's changes of holding wake the waiters of every other, as the
// events between instances do in the service.
func (e *env) instances(t *testing.T, n int, onChange func(lease.Event)) []*lease.Manager {
	t.Helper()
	ms := make([]*lease.Manager, n)
	for i := range ms {
		m, err := lease.NewManager(e.Store, lease.Config{OnChange: func(ev lease.Event) {
			if onChange != nil {
				onChange(ev)
			}
			if ev.Ends() {
				for _, other := range ms {
					other.Wake(ev.Lease.Name)
				}
			}
		}})
		if err != nil {
			t.Fatalf("NewManager: %v", err)
		}
		ms[i] = m
	}
	return ms
}

// candidate is a waiting acquire with a priority, running in the
// background until it answers or its context is cancelled.
type candidate struct {
	holder string
	cancel context.CancelFunc
	done   chan struct{}
	l      lease.Lease
	err    error
}

// wait starts a candidate for holder on m, waiting up to a minute.
func wait(t *testing.T, m *lease.Manager, name, holder string, priority int, preempt bool) *candidate {
	ctx, cancel := context.WithCancel(t.Context())
	c := &candidate{holder: holder, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.l, c.err = m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: holder, TTL: live, Wait: time.Minute,
			Priority: priority, Candidate: true, Preempt: preempt})
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// answered waits up to d for the candidate's answer and reports whether it
// came.
func (c *candidate) answered(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// until polls name until cond holds of it, for up to 20 s.
func until(t *testing.T, m *lease.Manager, name, what string, cond func(lease.Lease) bool) lease.Lease {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := m.Get(t.Context(), name)
		if err == nil && cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s; last %+v, %v", name, l, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// registered waits until name has n registered candidates.
func registered(t *testing.T, m *lease.Manager, name string, n int) lease.Lease {
	t.Helper()
	return until(t, m, name, fmt.Sprintf("%d candidates", n), func(l lease.Lease) bool { return l.CandidateCount() == n })
}

// testSuccessionPriority: with candidates of priorities 1, 5 and 10
// waiting on two instances in random order, a release hands the lease to
// the 10, every round.
func (s *suite) testSuccessionPriority(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	for round := range s.opts.SuccessionRounds {
		name := e.name(fmt.Sprintf("prio%d", round))
		h := acquire(t, ms[0], name, "holder")
		var cs []*candidate
		for _, p := range rand.Perm(3) {
			prio := []int{1, 5, 10}[p]
			cs = append(cs, wait(t, ms[rand.IntN(2)], name, fmt.Sprintf("c%02d", prio), prio, false))
			registered(t, ms[0], name, len(cs))
		}
		if _, err := ms[rand.IntN(2)].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "holder", FencingToken: h.FencingToken}); err != nil {
			t.Fatalf("round %d: Release: %v", round, err)
		}
		for _, c := range cs {
			if c.holder != "c10" {
				continue
			}
			if !c.answered(20 * time.Second) {
				t.Fatalf("round %d: the 10 did not get the lease within 20s", round)
			}
			if c.err != nil || c.l.Holder != "c10" || c.l.FencingToken != h.FencingToken+1 {
				t.Fatalf("round %d: the 10's acquire = %+v, %v; want token %d", round, c.l, c.err, h.FencingToken+1)
			}
		}
		for _, c := range cs {
			c.cancel()
			<-c.done
			if c.holder != "c10" && c.err == nil {
				t.Fatalf("round %d: %s got the lease (%+v); only the 10 should", round, c.holder, c.l)
			}
		}
	}
}

// testSuccessionTieBreak: equal priorities go to the earliest waiter, not
// to the first holder in byte order; ranking by holder is the last resort.
func testSuccessionTieBreak(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	name := e.name("tie")
	h := acquire(t, ms[0], name, "holder")
	b := wait(t, ms[1], name, "b", 5, false)
	registered(t, ms[0], name, 1)
	e.pass(time.Millisecond) // a later start of waiting, on every clock
	a := wait(t, ms[0], name, "a", 5, false)
	registered(t, ms[0], name, 2)
	if _, err := ms[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "holder", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if !b.answered(20*time.Second) || b.err != nil || b.l.Holder != "b" {
		t.Fatalf("earliest waiter b: %+v, %v; want the lease", b.l, b.err)
	}
	a.cancel()
	if <-a.done; a.err == nil {
		t.Fatalf("a got the lease: %+v", a.l)
	}
}

// testSuccessionGoneCandidate: a candidate whose request ended is
// forgotten within 2 s, and the next release goes to the best remaining.
func testSuccessionGoneCandidate(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	name := e.name("gone")
	h := acquire(t, ms[0], name, "holder")
	ten := wait(t, ms[1], name, "c10", 10, false)
	five := wait(t, ms[0], name, "c05", 5, false)
	registered(t, ms[0], name, 2)
	ten.cancel()
	start := time.Now()
	<-ten.done
	registered(t, ms[0], name, 1)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a gone candidate was forgotten after %v, want ≤ 2s", d)
	}
	if _, err := ms[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "holder", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if !five.answered(20*time.Second) || five.err != nil || five.l.Holder != "c05" {
		t.Fatalf("c05 after c10 went away: %+v, %v; want the lease", five.l, five.err)
	}
}

// plant registers a candidate directly in the stored record, as an
// instance that was killed while its candidate waited leaves it behind.
func plant(t *testing.T, e *env, name string, c lease.Candidate) {
	t.Helper()
	_, err := e.recs.Update(t.Context(), name, func(s lease.Snapshot) (*lease.Record, error) {
		next := *s.Record
		c.Since, c.Until = s.ServerTime.Truncate(time.Microsecond), s.ServerTime.Add(time.Hour).Truncate(time.Microsecond)
		next.Candidates = append(append([]lease.Candidate(nil), s.Record.Candidates...), c)
		return &next, nil
	})
	if err != nil {
		t.Fatalf("plant candidate %s: %v", c.Holder, err)
	}
}

// testSuccessionDeadCandidate: a registration left behind by a dead
// instance reserves a free lease for at most ReserveWindow; meanwhile
// anyone else's acquire is refused ErrReserved, a waiting candidate keeps
// waiting, and once it lapses the lease goes to a live one.
func testSuccessionDeadCandidate(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	name := e.name("dead")
	h := acquire(t, ms[0], name, "holder")
	plant(t, e, name, lease.Candidate{ID: "dead", Holder: "ghost", Priority: 10})
	five := wait(t, ms[1], name, "c05", 5, false)
	registered(t, ms[0], name, 2)
	rel, err := ms[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "holder", FencingToken: h.FencingToken})
	if err != nil {
		t.Fatal(err)
	}
	if who, _ := rel.Reservation(); who != "ghost" {
		t.Fatalf("after the release the lease is reserved for %q, want ghost", who)
	}
	_, err = ms[0].Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "other", TTL: live})
	var reserved *lease.ReservedError
	if !errors.As(err, &reserved) || !errors.Is(err, lease.ErrReserved) || reserved.ReservedFor != "ghost" ||
		reserved.Until.After(rel.ExpireTime.Add(lease.ReserveWindow)) || reserved.Lease.FencingToken != h.FencingToken {
		t.Fatalf("plain acquire during the reservation = %v, want ErrReserved for ghost until ≤ release+%v", err, lease.ReserveWindow)
	}
	if five.answered(time.Second) {
		t.Fatalf("c05 answered during ghost's reservation: %+v, %v", five.l, five.err)
	}
	e.pass(lease.ReserveWindow)
	if !five.answered(20*time.Second) || five.err != nil || five.l.Holder != "c05" || five.l.FencingToken != h.FencingToken+1 {
		t.Fatalf("c05 after ghost's reservation lapsed: %+v, %v; want token %d", five.l, five.err, h.FencingToken+1)
	}
	if e.Advance == nil {
		// Measured on the backend's clock, from the release to c05's
		// acquire, so that the test's own transactions in between do not
		// count; the slack is c05's wake at the lapse and its one acquire,
		// which a loaded emulator can hold up by a second or more.
		d := five.l.AcquireTime.Sub(rel.ExpireTime)
		t.Logf("free for %v of backend time between the release and c05's acquire", d)
		if d > lease.ReserveWindow+3*time.Second {
			t.Errorf("the dead candidate kept the lease free for %v of backend time, want ≤ %v (+3s for c05's wake and acquire)", d, lease.ReserveWindow)
		}
	}
	// With nobody left to wait for but the ghost, the next end of holding
	// reserves for it again, and the lapse opens the lease to everyone.
	if _, err := ms[1].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "c05", FencingToken: five.l.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if _, err := ms[0].Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "other", TTL: live}); !errors.Is(err, lease.ErrReserved) {
		t.Fatalf("plain acquire right after the release = %v, want ErrReserved", err)
	}
	e.pass(lease.ReserveWindow)
	if l := acquire(t, ms[0], name, "other"); l.FencingToken != h.FencingToken+2 {
		t.Fatalf("plain acquire after the lapse: token %d, want %d", l.FencingToken, h.FencingToken+2)
	}
}

// testSuccessionPreempt: a preempting candidate of higher priority makes the
// holder's renewals ask it to yield; it checkpoints on release, and the
// candidate leads with the next token and that checkpoint.
func testSuccessionPreempt(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	name := e.name("preempt")
	h, err := ms[0].Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "low", TTL: live, Priority: 1, Candidate: true})
	if err != nil || h.Priority != 1 {
		t.Fatalf("Acquire with priority 1 = %+v, %v", h, err)
	}
	polite := wait(t, ms[1], name, "polite", 20, false) // higher, but does not preempt
	registered(t, ms[0], name, 1)
	renew := func(cp string) lease.Lease {
		t.Helper()
		var raw json.RawMessage
		if cp != "" {
			raw = json.RawMessage(cp)
		}
		r, err := ms[0].Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "low", FencingToken: h.FencingToken, Checkpoint: raw})
		if err != nil {
			t.Fatalf("Renew: %v", err)
		}
		return r
	}
	if r := renew(""); r.YieldTo() != "" {
		t.Fatalf("Renew with a non-preempting candidate asks to yield to %q", r.YieldTo())
	}
	high := wait(t, ms[1], name, "high", 10, true)
	registered(t, ms[0], name, 2)
	r := renew(`{"step":7}`)
	if r.YieldTo() != "high" {
		t.Fatalf("Renew with a preempting priority-10 candidate: YieldTo = %q, want high", r.YieldTo())
	}
	if !r.Held() || r.FencingToken != h.FencingToken || string(r.Checkpoint) != `{"step":7}` || r.CheckpointToken != h.FencingToken {
		t.Fatalf("Renew = %+v: the holding must go on, with the checkpoint written", r)
	}
	// The polite 20 outranks the preempting 10 for the reservation: the
	// release hands the lease to the best candidate, not to the one that asked.
	polite.cancel()
	<-polite.done
	registered(t, ms[0], name, 1)
	if _, err := ms[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "low", FencingToken: h.FencingToken, Checkpoint: json.RawMessage(`{"step":8}`)}); err != nil {
		t.Fatal(err)
	}
	if !high.answered(20*time.Second) || high.err != nil {
		t.Fatalf("high after the release: %v", high.err)
	}
	if l := high.l; l.Holder != "high" || l.FencingToken != h.FencingToken+1 || string(l.Checkpoint) != `{"step":8}` || l.CheckpointToken != h.FencingToken || l.Priority != 10 {
		t.Fatalf("high leads with %+v; want token %d, checkpoint {\"step\":8} of token %d, priority 10", l, h.FencingToken+1, h.FencingToken)
	}
}

// testSuccessionCheckpoint: a checkpoint survives a crash (expiry) and
// reaches the next holder; only the current holding may write one.
func testSuccessionCheckpoint(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("checkpoint")
	a := acquireFor(t, m, name, "a", ttl)
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: a.FencingToken, Checkpoint: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	e.expire(ttl) // a crashed
	b := acquire(t, m, name, "b")
	if string(b.Checkpoint) != `{"n":1}` || b.CheckpointToken != a.FencingToken {
		t.Fatalf("the next holder got checkpoint %s of token %d, want {\"n\":1} of token %d", b.Checkpoint, b.CheckpointToken, a.FencingToken)
	}
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: a.FencingToken, Checkpoint: json.RawMessage(`{"n":99}`)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("a stale holding's checkpoint = %v, want ErrLost", err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: a.FencingToken, Checkpoint: json.RawMessage(`{"n":99}`)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("a stale holding's checkpoint on release = %v, want ErrLost", err)
	}
	if g := get(t, m, name); string(g.Checkpoint) != `{"n":1}` || g.CheckpointToken != a.FencingToken {
		t.Fatalf("after stale writes the checkpoint is %s of token %d, want the one of token %d", g.Checkpoint, g.CheckpointToken, a.FencingToken)
	}
}

// testSuccessionTransfer: a transfer ends the holding, reserves the lease
// for the successor and is announced as released with the successor.
func testSuccessionTransfer(t *testing.T, e *env) {
	rec := &recorder{}
	m := e.manager(t, rec.add)
	name := e.name("transfer")
	a := acquire(t, m, name, "a")
	req := lease.TransferRequest{Name: name, Holder: "a", FencingToken: a.FencingToken, To: "b", Checkpoint: json.RawMessage(`{"k":"v"}`), Reserve: time.Minute}
	if _, err := m.Transfer(t.Context(), lease.TransferRequest{Name: name, Holder: "x", FencingToken: a.FencingToken, To: "b"}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("Transfer by a non-holder = %v, want ErrLost", err)
	}
	rec.take()
	tr, err := m.Transfer(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if who, _ := tr.Reservation(); tr.Held() || who != "b" {
		t.Fatalf("Transfer = %+v, reserved for %q; want ended, reserved for b", tr, who)
	}
	if evs := rec.take(); len(evs) != 1 || evs[0].Type != lease.EventReleased || evs[0].Successor != "b" {
		t.Fatalf("events of the transfer = %+v, want one released with successor b", evs)
	}
	if again, err := m.Transfer(t.Context(), req); err != nil || !sameState(again, tr) {
		t.Fatalf("repeated Transfer = %+v, %v; want the same, idempotent", again, err)
	}
	if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live}); !errors.Is(err, lease.ErrReserved) {
		t.Fatalf("the old holder's acquire during the transfer = %v, want ErrReserved", err)
	}
	b := acquire(t, m, name, "b")
	if b.FencingToken != a.FencingToken+1 || string(b.Checkpoint) != `{"k":"v"}` {
		t.Fatalf("successor's acquire = %+v, want token %d with the checkpoint", b, a.FencingToken+1)
	}
	if who, _ := b.Reservation(); who != "" {
		t.Fatalf("a held lease is reserved for %q", who)
	}
}

// testSuccessionNoPriority: callers that send no priority see the contract
// of docs/contract.md §3 unchanged: waiters do not register, and a
// released lease is free for anyone at once.
func testSuccessionNoPriority(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	name := e.name("plain")
	h := acquire(t, ms[0], name, "holder")
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = ms[1].Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "waiter", TTL: live, Wait: time.Minute})
	})
	defer wg.Wait()
	defer cancel()
	time.Sleep(100 * time.Millisecond)
	if n := get(t, ms[0], name).CandidateCount(); n != 0 {
		t.Fatalf("a waiting acquire without priority registered %d candidates", n)
	}
	cancel()
	wg.Wait()
	if _, err := ms[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "holder", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if l := acquire(t, ms[1], name, "other"); l.FencingToken != h.FencingToken+1 || l.Priority != 0 || l.Checkpoint != nil {
		t.Fatalf("plain acquire after the release = %+v", l)
	}
}

// testSuccessionReaskKeepsPlace: a candidate whose wait ran out and that
// asks again at once (as an Elector does, turn after turn) keeps its place
// in line before an equal candidate that began waiting after it.
func testSuccessionReaskKeepsPlace(t *testing.T, e *env) {
	ms := e.instances(t, 2, nil)
	name := e.name("reask")
	h := acquire(t, ms[0], name, "holder")
	_, err := ms[1].Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "b", TTL: live, Wait: 300 * time.Millisecond, Priority: 5, Candidate: true})
	if !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("b's first turn = %v, want ErrHeld when its wait ran out", err)
	}
	e.pass(400 * time.Millisecond) // b's registration has ended, on every clock; its place is kept

	a := wait(t, ms[0], name, "a", 5, false)
	registered(t, ms[0], name, 1) // a; b's turn has ended
	b := wait(t, ms[1], name, "b", 5, false)
	registered(t, ms[0], name, 2)
	if _, err := ms[0].Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "holder", FencingToken: h.FencingToken}); err != nil {
		t.Fatal(err)
	}
	if !b.answered(20*time.Second) || b.err != nil || b.l.Holder != "b" {
		t.Fatalf("b, which began waiting first and asked again at once: %+v, %v; want the lease", b.l, b.err)
	}
	a.cancel()
	if <-a.done; a.err == nil {
		t.Fatalf("a got the lease: %+v", a.l)
	}
}
