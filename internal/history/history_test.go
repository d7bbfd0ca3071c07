package history

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// contender is one contender's loop in a run: it acts on name as holder
// until ctx ends, recording each call through do.
type contender func(ctx context.Context, m *lease.Manager, c int, rng *rand.Rand, name, holder string, do func(Entry, func() (lease.Lease, error)) (lease.Lease, bool))

// drive runs contenders loops of body against one Manager over the memory
// backend for d, contender c on names[c%len(names)] as holder "c<c>" with
// its own random source (seeded by c and seed), and records what they were
// answered; view, if set, is how a client sees an answer (see attempt).
// dropAnswers is the share of answers recorded as Maybe: half of them the
// operation happened and the answer was lost, half it never reached the
// Manager. It returns the entries, ending with a final get of every name,
// and those finals.
func drive(t *testing.T, names []string, seed uint64, contenders int, d time.Duration, dropAnswers float64,
	view func(*testing.T, lease.Lease) lease.Lease, body contender) ([]Entry, map[string]*lease.Lease) {
	t.Helper()
	m, err := lease.NewManager(memory.New(), lease.Config{MinTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var rec Recorder
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var wg sync.WaitGroup
	for c := range contenders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), seed))
			name := names[c%len(names)]
			holder := fmt.Sprintf("c%d", c)
			body(ctx, m, c, rng, name, holder, func(e Entry, f func() (lease.Lease, error)) (lease.Lease, bool) {
				e.Client, e.Name, e.Holder = c, name, holder
				return attempt(t, &rec, rng, dropAnswers, e, view, f)
			})
		})
	}
	wg.Wait()
	entries := rec.Entries()
	finals := map[string]*lease.Lease{}
	for _, n := range names {
		call := time.Now()
		l, err := m.Get(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		finals[n] = &l
		entries = append(entries, Entry{Client: -1, Name: n, Op: Get, Call: call, Return: time.Now(), Outcome: OK, Lease: &l})
	}
	return entries, finals
}

// run drives contenders that acquire, get, renew and release (see drive).
func run(t *testing.T, contenders int, d time.Duration, dropAnswers float64) ([]Entry, map[string]*lease.Lease) {
	t.Helper()
	return drive(t, []string{"a.one", "a.two"}, 7, contenders, d, dropAnswers, nil,
		func(ctx context.Context, m *lease.Manager, _ int, rng *rand.Rand, name, holder string, do func(Entry, func() (lease.Lease, error)) (lease.Lease, bool)) {
			const ttl = 5 * time.Millisecond
			for ctx.Err() == nil {
				l, ok := do(Entry{Op: Acquire, TTL: ttl}, func() (lease.Lease, error) {
					return m.Acquire(context.Background(), lease.AcquireRequest{Name: name, Holder: holder, TTL: ttl})
				})
				if rng.IntN(4) == 0 {
					do(Entry{Op: Get}, func() (lease.Lease, error) { return m.Get(context.Background(), name) })
				}
				if !ok {
					time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
					continue
				}
				for range rng.IntN(3) {
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					do(Entry{Op: Renew, Token: l.FencingToken}, func() (lease.Lease, error) {
						return m.Renew(context.Background(), lease.RenewRequest{Name: name, Holder: holder, FencingToken: l.FencingToken})
					})
				}
				if rng.IntN(2) == 0 {
					do(Entry{Op: Release, Token: l.FencingToken}, func() (lease.Lease, error) {
						return m.Release(context.Background(), lease.ReleaseRequest{Name: name, Holder: holder, FencingToken: l.FencingToken})
					})
				}
			}
		})
}

// checkValid checks a history of a correct backend: no violation, at least
// 10 holdings (so the run exercised something), and porcupine agrees.
func checkValid(t *testing.T, entries []Entry, finals map[string]*lease.Lease) Result {
	t.Helper()
	res := Check(entries, finals)
	if res.Count != 0 {
		t.Fatalf("%d violations in a valid history: %v", res.Count, res.Violations)
	}
	if res.Holdings < 10 {
		t.Fatalf("only %d holdings: the run exercised too little", res.Holdings)
	}
	lin := Linearizable(entries, 30*time.Second)
	if lin.Result != porcupine.Ok {
		t.Fatalf("porcupine: %v (illegal %v, unknown %v) on a valid history", lin.Result, lin.Illegal, lin.Unknown)
	}
	return res
}

func TestValidHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop float64
	}{{"all answered", 0}, {"some answers lost", 0.05}} {
		t.Run(tc.name, func(t *testing.T) {
			entries, finals := run(t, 8, 300*time.Millisecond, tc.drop)
			res := checkValid(t, entries, finals)
			t.Logf("%d ops %v, %d holdings", len(entries), res.Ops, res.Holdings)
		})
	}
}

// mk builds a lease answer at server time s (ms from a base).
func mk(holder string, token int64, ttlMs, acquire, renew, expire, server int) *lease.Lease {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	return &lease.Lease{Record: lease.Record{Name: "x", Holder: holder, FencingToken: token, TTL: time.Duration(ttlMs) * time.Millisecond, AcquireTime: at(acquire), RenewTime: at(renew), ExpireTime: at(expire), Transitions: token}, ServerTime: at(server)}
}

// seq builds entries that follow one another in real time.
func seq(es ...Entry) []Entry {
	t0 := time.Now()
	for i := range es {
		es[i].Name = "x"
		es[i].Call = t0.Add(time.Duration(2*i) * time.Millisecond)
		es[i].Return = es[i].Call.Add(time.Millisecond)
	}
	return es
}

func TestViolationsFound(t *testing.T) {
	cases := []struct {
		name    string
		entries []Entry
		final   *lease.Lease
		want    string // in a violation message
		illegal bool   // porcupine must also refuse it
	}{
		{
			name: "overlap",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 500, 500, 1500, 500)},
			),
			want: "overlap", illegal: true,
		},
		{
			name: "overlap after a renew",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 1, Op: Renew, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 900, 1900, 900)},
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 1200, 1200, 2200, 1200)},
			),
			want: "overlap", illegal: true,
		},
		{
			name: "token reused",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 1, 1000, 2000, 2000, 3000, 2000)},
			),
			want: "reused", illegal: true,
		},
		{
			name: "lost renew",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 1, Op: Renew, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 500, 1500, 500)},
			),
			final: mk("a", 1, 1000, 0, 0, 1000, 3000),
			want:  "final read", illegal: true,
		},
		{
			name: "lost acquire",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 1, Op: Release, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 100, 100)},
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 200, 200, 1200, 200)},
			),
			final: mk("a", 1, 1000, 0, 0, 100, 3000),
			want:  "final read", illegal: true,
		},
		{
			name: "stale read after a release",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 1, Op: Release, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 100, 100)},
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: Held, Lease: mk("a", 1, 1000, 0, 0, 1000, 200)},
			),
			want: "", illegal: true,
		},
		{
			name: "stale read sent after the next holding was acknowledged",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 1, Op: Release, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 100, 100)},
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 200, 200, 1200, 200)},
				Entry{Client: 3, Op: Acquire, Holder: "c", TTL: time.Second, Outcome: Held, Lease: mk("a", 1, 1000, 0, 0, 1000, 300)},
			),
			want: "a stale read", illegal: true,
		},
		{
			name: "renew answer with the wrong expiry",
			entries: seq(
				Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
				Entry{Client: 1, Op: Renew, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 500, 1400, 500)},
			),
			want: "a renew must", illegal: true,
		},
		{
			name: "phantom holding",
			entries: seq(
				Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: Held, Lease: mk("a", 1, 1000, 0, 0, 1000, 10)},
			),
			want: "never told", illegal: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			finals := map[string]*lease.Lease{}
			entries := tc.entries
			if tc.final != nil {
				finals["x"] = tc.final
				last := entries[len(entries)-1]
				entries = append(entries, Entry{Client: 9, Name: "x", Op: Get, Call: last.Return.Add(time.Millisecond),
					Return: last.Return.Add(2 * time.Millisecond), Outcome: OK, Lease: tc.final})
			}
			res := Check(entries, finals)
			if tc.want != "" {
				found := false
				for _, v := range res.Violations {
					found = found || strings.Contains(v.String(), tc.want)
				}
				if !found {
					t.Errorf("Check found %v, want a violation saying %q", res.Violations, tc.want)
				}
			}
			lin := Linearizable(entries, 10*time.Second)
			if tc.illegal && lin.Result != porcupine.Illegal {
				t.Errorf("porcupine: %v, want Illegal", lin.Result)
			}
			if tc.want == "" && !tc.illegal {
				t.Fatal("a case must expect something")
			}
		})
	}
}

// TestReadConcurrentWithACommitIsStale: a read (here a refusal) at server
// time s that still shows a holding live although its successor began
// before s is linearizable when the read overlapped the writes in real time
// (porcupine accepts it), but it breaks docs/contract.md §1 (held is serverTime <
// expireTime when the answer was computed), and the exact check reports
// it. This is the pattern Spanner showed before its backend decided at the
// commit timestamp of what it read.
func TestReadConcurrentWithACommitIsStale(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	entries := []Entry{
		{Client: 1, Name: "x", Op: Acquire, Holder: "a", TTL: time.Second, Call: at(0), Return: at(1), Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
		{Client: 1, Name: "x", Op: Release, Holder: "a", Token: 1, Call: at(2), Return: at(3), Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 100, 100)},
		// b's acquire is decided at 200 and answered at real time 10; c's
		// refusal, sent at 2 (before the release and b's acquire were
		// answered), shows token 1 still live at 201.
		{Client: 2, Name: "x", Op: Acquire, Holder: "b", TTL: time.Second, Call: at(4), Return: at(10), Outcome: OK, Lease: mk("b", 2, 1000, 200, 200, 1200, 200)},
		{Client: 3, Name: "x", Op: Acquire, Holder: "c", TTL: time.Second, Call: at(2), Return: at(9), Outcome: Held, Lease: mk("a", 1, 1000, 0, 0, 1000, 201)},
	}
	if res := Check(entries, nil); res.Count != 1 || !strings.Contains(fmt.Sprint(res.Violations), "a stale read") {
		t.Fatalf("Check found %v, want one stale read", res.Violations)
	}
	if lin := Linearizable(entries, 10*time.Second); lin.Result != porcupine.Ok {
		t.Fatalf("porcupine: %v, want Ok (the read overlapped the writes)", lin.Result)
	}
}

// TestMaybeRenewLandsLate: an unanswered renew may take effect after a
// later acknowledged renew, extending the holding further; that is legal.
func TestMaybeRenewLandsLate(t *testing.T) {
	entries := seq(
		Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
		Entry{Client: 1, Op: Renew, Holder: "a", Token: 1, Outcome: Maybe},
		Entry{Client: 1, Op: Renew, Holder: "a", Token: 1, Outcome: OK, Lease: mk("a", 1, 1000, 0, 300, 1300, 300)},
		Entry{Client: 2, Op: Get, Outcome: OK, Lease: mk("a", 1, 1000, 0, 400, 1400, 450)},
		Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 1500, 1500, 2500, 1500)},
	)
	final := mk("b", 2, 1000, 1500, 1500, 2500, 3000)
	res := Check(entries, map[string]*lease.Lease{"x": final})
	if res.Count != 0 {
		t.Fatalf("violations %v in a legal history", res.Violations)
	}
	if lin := Linearizable(entries, 10*time.Second); lin.Result != porcupine.Ok {
		t.Fatalf("porcupine: %v, want Ok", lin.Result)
	}
}

// TestMaybeAcquireMakesAHolding: an unanswered acquire may create a holding
// that only others see.
func TestMaybeAcquireMakesAHolding(t *testing.T) {
	entries := seq(
		Entry{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: Maybe},
		Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: Held, Lease: mk("a", 1, 1000, 10, 10, 1010, 20)},
		Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 1100, 1100, 2100, 1100)},
	)
	res := Check(entries, nil)
	if res.Count != 0 {
		t.Fatalf("violations %v in a legal history", res.Violations)
	}
	if lin := Linearizable(entries, 10*time.Second); lin.Result != porcupine.Ok {
		t.Fatalf("porcupine: %v, want Ok", lin.Result)
	}
}

// attempt makes one call f of a contender and records what it was
// answered in rec. dropAnswers is the share of calls recorded as Maybe:
// half of them never reach the Manager, half lose their answer. view, if
// set, maps an answered lease to the lease the HTTP API shows. An error no
// client can be answered fails the test. It reports whether the call
// succeeded and its answer was kept.
func attempt(t *testing.T, rec *Recorder, rng *rand.Rand, dropAnswers float64, e Entry, view func(*testing.T, lease.Lease) lease.Lease, f func() (lease.Lease, error)) (lease.Lease, bool) {
	e.Call = time.Now()
	if rng.Float64() < dropAnswers/2 { // sent, never arrived
		e.Outcome = Maybe
		rec.Add(e)
		return lease.Lease{}, false
	}
	l, err := f()
	e.Return = time.Now()
	var held *lease.HeldError
	var reserved *lease.ReservedError
	if view != nil && errors.As(err, &reserved) {
		reserved.Lease = view(t, reserved.Lease)
	}
	if view != nil && err == nil {
		l = view(t, l)
	}
	switch {
	case err == nil:
		e.Outcome, e.Lease = OK, &l
	case errors.As(err, &held):
		e.Outcome, e.Lease = Held, &held.Lease
	case errors.As(err, &reserved):
		e.Outcome, e.Lease = Reserved, &reserved.Lease
	case errors.Is(err, lease.ErrLost):
		e.Outcome = Lost
	case errors.Is(err, lease.ErrNotFound):
		e.Outcome = NotFound
	default:
		t.Errorf("%s: %v", describe(e), err)
		e.Outcome = Maybe
	}
	if rng.Float64() < dropAnswers/2 {
		e.Outcome, e.Lease = Maybe, nil
	}
	rec.Add(e)
	return l, err == nil && e.Outcome == OK
}
