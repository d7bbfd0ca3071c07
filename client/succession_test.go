package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// TestSuccessionFields: the succession fields of docs/contract.md §8 come
// through the SDK both ways: a priority recorded on the holding, a
// checkpoint written by renew and by release and inherited by the next
// acquire, the yield a preempting candidate asks for, and a transfer's
// reservation refusing anyone else with a *ReservedError.
func TestSuccessionFields(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	ctx := t.Context()
	const name = "succ.fields"

	a, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "a", TTL: 10 * time.Second, Priority: 3})
	if err != nil || a.Priority != 3 || a.Checkpoint != nil {
		t.Fatalf("acquire with priority 3: %+v, %v", a, err)
	}
	r, err := c.Renew(ctx, name, client.RenewRequest{Holder: "a", FencingToken: 1, Checkpoint: json.RawMessage(`{"step": 1}`)})
	if err != nil || string(r.Checkpoint) != `{"step":1}` || r.CheckpointToken != 1 {
		t.Fatalf("renew with a checkpoint: %s %d, %v", r.Checkpoint, r.CheckpointToken, err)
	}

	// A preempting candidate of a higher priority waits; a's renewals are
	// asked to yield to it.
	waited := make(chan error, 1)
	var got client.Lease
	go func() {
		l, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "b", TTL: 10 * time.Second, Wait: 10 * time.Second, Priority: 7, Preempt: true})
		got = l
		waited <- err
	}()
	waitFor(t, "the yield request", func() bool {
		r, err = c.Renew(ctx, name, client.RenewRequest{Holder: "a", FencingToken: 1})
		return err == nil && r.YieldRequested
	})
	if r.YieldTo != "b" || r.Candidates != 1 || r.BestCandidatePriority != 7 {
		t.Fatalf("renew while b preempts: yieldTo %q, candidates %d (best priority %d)", r.YieldTo, r.Candidates, r.BestCandidatePriority)
	}
	// A stepping down with a checkpoint: b gets the lease and the checkpoint.
	rel, err := c.ReleaseWith(ctx, name, client.ReleaseRequest{Holder: "a", FencingToken: 1, Checkpoint: json.RawMessage(`{"step":2}`)})
	if err != nil || rel.Held || string(rel.Checkpoint) != `{"step":2}` {
		t.Fatalf("release with a checkpoint: %+v, %v", rel, err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("b's waiting acquire: %v", err)
	}
	if got.Holder != "b" || got.FencingToken != 2 || string(got.Checkpoint) != `{"step":2}` || got.CheckpointToken != 1 || got.Priority != 7 {
		t.Fatalf("b's acquire: %s token %d checkpoint %s by %d priority %d", got.Holder, got.FencingToken, got.Checkpoint, got.CheckpointToken, got.Priority)
	}

	// b transfers to c: d is refused with the reservation, c gets token 3.
	tr, err := c.Transfer(ctx, name, client.TransferRequest{Holder: "b", FencingToken: 2, To: "c", Checkpoint: json.RawMessage(`{"step":3}`), Reserve: 20 * time.Second})
	if err != nil || tr.Held || tr.ReservedFor != "c" || tr.ReservedUntil.Sub(tr.ServerTime) != 20*time.Second {
		t.Fatalf("transfer: %+v, %v", tr, err)
	}
	if _, err := c.Transfer(ctx, name, client.TransferRequest{Holder: "b", FencingToken: 2, To: "c"}); err != nil {
		t.Fatalf("the same transfer again: %v, want the idempotent success", err)
	}
	_, err = c.Acquire(ctx, name, client.AcquireRequest{Holder: "d", TTL: 10 * time.Second})
	var res *client.ReservedError
	if !errors.Is(err, client.ErrReserved) || !errors.As(err, &res) || errors.Is(err, client.ErrHeld) {
		t.Fatalf("acquire by d while reserved for c: %v, want a *ReservedError", err)
	}
	if res.ReservedFor != "c" || !res.ReservedUntil.Equal(tr.ReservedUntil) || res.RetryAfter < 19*time.Second || res.Lease.Name != name {
		t.Fatalf("ReservedError %+v", res)
	}
	l, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "c", TTL: 10 * time.Second})
	if err != nil || l.FencingToken != 3 || string(l.Checkpoint) != `{"step":3}` || l.CheckpointToken != 2 || l.ReservedFor != "" {
		t.Fatalf("c's acquire: %+v, %v", l, err)
	}
	if _, err := c.Transfer(ctx, name, client.TransferRequest{Holder: "b", FencingToken: 2, To: "c"}); !errors.Is(err, client.ErrLost) {
		t.Fatalf("b's transfer after c acquired: %v, want ErrLost", err)
	}

	// The JSON form keeps every field.
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	var back client.Lease
	if err := json.Unmarshal(b, &back); err != nil || back.ReservedFor != "c" || !back.ReservedUntil.Equal(tr.ReservedUntil) ||
		string(back.Checkpoint) != `{"step":3}` || back.CheckpointToken != 2 || back.Priority != 7 {
		t.Fatalf("JSON round trip: %s → %+v, %v", b, back, err)
	}
}

// TestAcquireSendsPriorityOnlyWhenAsked: an acquire without priority,
// candidate or preempt sends no priority (it waits unranked, as before
// succession); Candidate sends a priority of 0.
func TestAcquireSendsPriorityOnlyWhenAsked(t *testing.T) {
	f := newFakeLeases(t, time.Now)
	c, err := client.New(f.URL, client.Config{TokenSource: client.StaticToken("agent")})
	if err != nil {
		t.Fatal(err)
	}
	for i, req := range []client.AcquireRequest{
		{Holder: "a", TTL: time.Second},
		{Holder: "a", TTL: time.Second, Candidate: true},
		{Holder: "a", TTL: time.Second, Priority: 5},
	} {
		if _, err := c.Acquire(t.Context(), "p", req); err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	rs := f.requests("acquire")
	if _, ok := rs[0].Body["priority"]; ok {
		t.Fatalf("a plain acquire sent %v", rs[0].Body)
	}
	if p, ok := rs[1].Body["priority"]; !ok || p != 0.0 {
		t.Fatalf("a candidate's acquire sent %v, want priority 0", rs[1].Body)
	}
	if p := rs[2].Body["priority"]; p != 5.0 {
		t.Fatalf("acquire with priority 5 sent %v", rs[2].Body)
	}
}

// realConfig is an Elector config for tests of hand-overs through the
// service's waiting acquires, over a Keeper of realKeeper.
func realConfig(holder string, lead func(ctx context.Context)) client.ElectorConfig {
	return client.ElectorConfig{Holder: holder, Wait: 5 * time.Second, Callbacks: client.LeaderCallbacks{OnStartedLeading: lead}}
}

// realKeeper is a Keeper config on the real clock, with a short TTL.
var realKeeper = client.KeeperConfig{TTL: 2 * time.Second, RenewInterval: 200 * time.Millisecond}

// leadRecord is what OnStartedLeading saw of each term.
type leadRecord struct {
	mu         sync.Mutex
	tokens     []int64
	checkpoint []string // inherited, per term
	writtenBy  []int64
	causes     []error // why each term ended
}

func (r *leadRecord) lead(ctx context.Context) {
	tok, _ := client.TokenFromContext(ctx)
	cp, by := client.CheckpointFromContext(ctx)
	r.mu.Lock()
	r.tokens, r.checkpoint, r.writtenBy = append(r.tokens, tok), append(r.checkpoint, string(cp)), append(r.writtenBy, by)
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	r.causes = append(r.causes, context.Cause(ctx))
	r.mu.Unlock()
}

func (r *leadRecord) terms() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tokens)
}

func (r *leadRecord) ended() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.causes)
}

// TestElectorPreemption is the end-to-end preemption of docs/contract.md
// §8: a priority-1 Elector leads; a priority-10 preempting Elector joins;
// the first is asked to yield (OnYieldRequested), checkpoints and steps
// down; the second leads with the next fencing token and that checkpoint,
// and the first waits as a follower.
func TestElectorPreemption(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	const name = "succ.preempt"

	var low, high leadRecord
	var lowE *client.Elector
	yielded := make(chan string, 1)
	var cpErr error
	cfgLow := realConfig("low", low.lead)
	cfgLow.Priority = 1
	cfgLow.Callbacks.OnYieldRequested = func(ctx context.Context, to string) {
		cpErr = lowE.Checkpoint(ctx, map[string]any{"done": 42})
		yielded <- to
	}
	lowE, err := keeperElector(t, c, name, realKeeper, cfgLow)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, lowE)
	waitFor(t, "low leading", func() bool { return low.terms() == 1 })

	cfgHigh := realConfig("high", high.lead)
	cfgHigh.Priority, cfgHigh.Preempt = 10, true
	highE, err := keeperElector(t, c, name, realKeeper, cfgHigh)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, highE)
	select {
	case to := <-yielded:
		if to != "high" {
			t.Fatalf("OnYieldRequested(%q), want high", to)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("low was never asked to yield")
	}
	if cpErr != nil {
		t.Fatalf("Checkpoint in OnYieldRequested: %v", cpErr)
	}
	waitFor(t, "high leading", func() bool { return high.terms() == 1 })
	high.mu.Lock()
	tok, cp, by := high.tokens[0], high.checkpoint[0], high.writtenBy[0]
	high.mu.Unlock()
	if tok != 2 || cp != `{"done":42}` || by != 1 {
		t.Fatalf("high leads with token %d and checkpoint %s written by %d; want 2, {\"done\":42}, 1", tok, cp, by)
	}
	waitFor(t, "low's term over", func() bool { return low.ended() == 1 })
	low.mu.Lock()
	cause := low.causes[0]
	low.mu.Unlock()
	if !errors.Is(cause, client.ErrYielded) {
		t.Fatalf("low's term ended with %v, want ErrYielded", cause)
	}
	if lowE.IsLeader() || !highE.IsLeader() {
		t.Fatalf("low leads %v, high leads %v", lowE.IsLeader(), highE.IsLeader())
	}
	// low waits as a registered candidate; high is not asked to yield to it.
	waitFor(t, "low registered as a candidate", func() bool {
		l, err := c.Get(t.Context(), name)
		return err == nil && l.Candidates == 1 && !l.YieldRequested && l.Priority == 10
	})
	if low.terms() != 1 {
		t.Fatal("low led again")
	}
}

// TestElectorTransfer: Transfer hands the holding to a named follower with
// a checkpoint: the leader's ctx ends with ErrTransferred, the follower
// leads with the next token and the checkpoint, and the old leader
// campaigns again as a follower.
func TestElectorTransfer(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	const name = "succ.transfer"
	var ra, rb leadRecord
	a, err := keeperElector(t, c, name, realKeeper, realConfig("a", ra.lead))
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, a)
	waitFor(t, "a leading", func() bool { return ra.terms() == 1 })
	if err := a.Transfer(t.Context(), "a", nil); err == nil {
		t.Fatal("Transfer to itself succeeded")
	}
	if err := a.Transfer(t.Context(), "b", json.RawMessage(`[1]`)); err == nil {
		t.Fatal("Transfer with a checkpoint that is no object succeeded")
	}
	b, err := keeperElector(t, c, name, realKeeper, realConfig("b", rb.lead))
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, b)
	waitFor(t, "b following", func() bool { h, _ := b.Leader(); return h == "a" })
	if err := a.SetCheckpoint(map[string]int{"pending": 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Transfer(t.Context(), "b", nil); err != nil { // sends the pending checkpoint
		t.Fatalf("Transfer: %v", err)
	}
	waitFor(t, "a's term over", func() bool { return ra.ended() == 1 })
	ra.mu.Lock()
	cause := ra.causes[0]
	ra.mu.Unlock()
	if !errors.Is(cause, client.ErrTransferred) {
		t.Fatalf("a's term ended with %v, want ErrTransferred", cause)
	}
	waitFor(t, "b leading", func() bool { return rb.terms() == 1 })
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.tokens[0] != 2 || rb.checkpoint[0] != `{"pending":1}` || rb.writtenBy[0] != 1 {
		t.Fatalf("b leads with token %d, checkpoint %s by %d", rb.tokens[0], rb.checkpoint[0], rb.writtenBy[0])
	}
	if err := a.Transfer(t.Context(), "b", nil); !errors.Is(err, client.ErrNotLeading) {
		t.Fatalf("Transfer while following: %v, want ErrNotLeading", err)
	}
}

// TestElectorCheckpoint: Checkpoint writes at once; SetCheckpoint goes
// with the next renew, and the release of a graceful stop carries the
// latest; both refuse what is not a JSON object, and outside a term they
// are ErrNotLeading.
func TestElectorCheckpoint(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	const name = "succ.checkpoint"
	var r leadRecord
	e, err := keeperElector(t, c, name, realKeeper, realConfig("a", r.lead))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetCheckpoint(map[string]int{"n": 0}); !errors.Is(err, client.ErrNotLeading) {
		t.Fatalf("SetCheckpoint before leading: %v", err)
	}
	stop := runElector(t, e)
	waitFor(t, "leading", func() bool { return r.terms() == 1 })
	if err := e.Checkpoint(t.Context(), "a string"); err == nil {
		t.Fatal("a checkpoint that is no object was taken")
	}
	if err := e.Checkpoint(t.Context(), map[string]int{"n": 1}); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if l, err := c.Get(t.Context(), name); err != nil || string(l.Checkpoint) != `{"n":1}` || l.CheckpointToken != 1 {
		t.Fatalf("after Checkpoint the lease has %s by %d, %v", l.Checkpoint, l.CheckpointToken, err)
	}
	if err := e.SetCheckpoint(json.RawMessage(`{"n": 2}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next renew to carry it", func() bool {
		l, err := c.Get(t.Context(), name)
		return err == nil && string(l.Checkpoint) == `{"n":2}`
	})
	if err := e.SetCheckpoint(json.RawMessage(`{"n":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l, err := c.Get(t.Context(), name)
	if err != nil || l.Held || string(l.Checkpoint) != `{"n":3}` {
		t.Fatalf("after a graceful stop the lease is held %v with %s, %v; want released with {\"n\":3}", l.Held, l.Checkpoint, err)
	}
	if err := e.Checkpoint(t.Context(), map[string]int{"n": 4}); !errors.Is(err, client.ErrNotLeading) {
		t.Fatalf("Checkpoint after Run: %v", err)
	}
}

// TestElectorStepsDownWithoutCallback: with no OnYieldRequested, a leader
// asked to yield steps down at once, releasing with the checkpoint it set
// last; an Elector of the same priority that preempts asks nothing.
func TestElectorStepsDownWithoutCallback(t *testing.T) { synctest.Test(t, stepsDownWithoutCallback) }

func stepsDownWithoutCallback(t *testing.T) {
	s := newServiceHandler(t, nil)
	c := s.bubbleClient(t)
	const name = "succ.default"
	var low, peer, high leadRecord
	cfg := realConfig("low", low.lead)
	cfg.Priority = 5
	lowE, err := keeperElector(t, c, name, realKeeper, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, lowE)
	synctest.Wait()
	if low.terms() != 1 {
		t.Fatalf("low leads %d terms, want 1", low.terms())
	}
	if err := lowE.SetCheckpoint(json.RawMessage(`{"at":"low"}`)); err != nil {
		t.Fatal(err)
	}

	// A preempting peer of the same priority: registered, but no yield.
	cfg = realConfig("peer", peer.lead)
	cfg.Priority, cfg.Preempt = 5, true
	peerE, err := keeperElector(t, c, name, realKeeper, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopPeer := runElector(t, peerE)
	synctest.Wait()
	if l, err := c.Get(t.Context(), name); err != nil || l.Candidates != 1 {
		t.Fatalf("the peer is not registered as a candidate: %+v, %v", l, err)
	}
	advance(500 * time.Millisecond) // two renewals of low
	if l, _ := c.Get(t.Context(), name); l.YieldRequested || !lowE.IsLeader() {
		t.Fatalf("a candidate of the same priority made low yield: %+v", l)
	}
	if err := stopPeer(); err != nil {
		t.Fatal(err)
	}

	cfg = realConfig("high", high.lead)
	cfg.Priority, cfg.Preempt = 6, true
	highE, err := keeperElector(t, c, name, realKeeper, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, highE)
	advance(time.Second) // low's next renewal hears of high, and low steps down
	if high.terms() != 1 {
		t.Fatalf("high leads %d terms, want 1", high.terms())
	}
	high.mu.Lock()
	tok, cp := high.tokens[0], high.checkpoint[0]
	high.mu.Unlock()
	if tok != 2 || cp != `{"at":"low"}` {
		t.Fatalf("high leads with token %d and checkpoint %s", tok, cp)
	}
	if low.ended() != 1 {
		t.Fatalf("low's terms ended: %d, want 1", low.ended())
	}
	low.mu.Lock()
	defer low.mu.Unlock()
	if !errors.Is(low.causes[0], client.ErrYielded) {
		t.Fatalf("low's term ended with %v", low.causes[0])
	}
}

// TestTransferToPrincipalIsSent: ToPrincipal reaches the service, which
// refuses it without authentication (there is no principal to name) and
// changes nothing; the holding can still be transferred without it.
func TestTransferToPrincipalIsSent(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	ctx := t.Context()
	const name = "succ.to-principal"
	if _, err := c.Acquire(ctx, name, client.AcquireRequest{Holder: "a", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Transfer(ctx, name, client.TransferRequest{Holder: "a", FencingToken: 1, To: "b", ToPrincipal: "b@example.com"})
	if !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("transfer with ToPrincipal, authentication off: %v, want ErrInvalid naming toPrincipal", err)
	}
	if tr, err := c.Transfer(ctx, name, client.TransferRequest{Holder: "a", FencingToken: 1, To: "b"}); err != nil || tr.ReservedFor != "b" {
		t.Fatalf("transfer without ToPrincipal: %+v, %v", tr, err)
	}
}
