package history

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// withCP returns l carrying checkpoint cp written by token.
func withCP(l *lease.Lease, cp string, token int64) *lease.Lease {
	l.Checkpoint, l.CheckpointToken = json.RawMessage(cp), token
	return l
}

// reservedFor returns l showing a reservation for who until ms.
func reservedFor(l *lease.Lease, who string, ms int) *lease.Lease {
	l.ReservedFor = who
	l.ReservedUntil = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
	return l
}

// succession is a legal history of docs/contract.md §8: a writes a
// checkpoint, transfers to b with another; c is refused lease_reserved; b
// acquires, inheriting it, and releases with a third, which c inherits.
// Each step is an entry; change replaces some before they are sequenced.
func succession(change func(es []Entry) []Entry) []Entry {
	es := []Entry{
		{Client: 1, Op: Acquire, Holder: "a", TTL: time.Second, Outcome: OK, Lease: mk("a", 1, 1000, 0, 0, 1000, 0)},
		{Client: 1, Op: Renew, Holder: "a", Token: 1, Checkpoint: json.RawMessage(`{"n":1}`), Outcome: OK,
			Lease: withCP(mk("a", 1, 1000, 0, 300, 1300, 300), `{"n": 1}`, 1)},
		{Client: 1, Op: Transfer, Holder: "a", Token: 1, To: "b", Checkpoint: json.RawMessage(`{"n":2}`), Outcome: OK,
			Lease: reservedFor(withCP(mk("a", 1, 1000, 0, 300, 500, 500), `{"n":2}`, 1), "b", 5500)},
		{Client: 3, Op: Acquire, Holder: "c", TTL: time.Second, Outcome: Reserved,
			Lease: reservedFor(withCP(mk("a", 1, 1000, 0, 300, 500, 600), `{"n":2}`, 1), "b", 5500)},
		{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Priority: 10, Outcome: OK,
			Lease: withCP(mk("b", 2, 1000, 700, 700, 1700, 700), `{"n":2}`, 1)},
		{Client: 2, Op: Release, Holder: "b", Token: 2, Checkpoint: json.RawMessage(`{"n":3}`), Outcome: OK,
			Lease: withCP(mk("b", 2, 1000, 700, 700, 800, 800), `{"n":3}`, 2)},
		{Client: 3, Op: Acquire, Holder: "c", TTL: time.Second, Outcome: OK,
			Lease: withCP(mk("c", 3, 1000, 900, 900, 1900, 900), `{"n":3}`, 2)},
	}
	if change != nil {
		es = change(es)
	}
	return seq(es...)
}

func TestSuccessionLegal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
	}{
		{"transfer, reservation, checkpoints inherited", succession(nil)},
		{"an unanswered checkpoint write may be the one inherited", succession(func(es []Entry) []Entry {
			es = append(es[:5:5], append([]Entry{
				{Client: 2, Op: Renew, Holder: "b", Token: 2, Checkpoint: json.RawMessage(`{"n":5}`), Outcome: Maybe},
			}, es[5:]...)...)
			es[len(es)-1].Lease = withCP(mk("c", 3, 1000, 900, 900, 1900, 900), `{"n":5}`, 2)
			return es
		})},
		{"a release of its own ended holding may still write the checkpoint", succession(func(es []Entry) []Entry {
			es = append(es[:6:6], append([]Entry{
				{Client: 2, Op: Release, Holder: "b", Token: 2, Checkpoint: json.RawMessage(`{"n":4}`), Outcome: OK,
					Lease: withCP(mk("b", 2, 1000, 700, 700, 800, 850), `{"n":4}`, 2)},
			}, es[6:]...)...)
			es[len(es)-1].Lease = withCP(mk("c", 3, 1000, 900, 900, 1900, 900), `{"n":4}`, 2)
			return es
		})},
		{"after the reservation lapsed anyone may acquire", succession(func(es []Entry) []Entry {
			es[4] = Entry{Client: 3, Op: Acquire, Holder: "c", TTL: time.Second, Outcome: OK,
				Lease: withCP(mk("c", 2, 1000, 5600, 5600, 6600, 5600), `{"n":2}`, 1)}
			return es[:5]
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			final := tc.entries[len(tc.entries)-1].Lease
			f := *final
			f.ServerTime = f.ServerTime.Add(10 * time.Millisecond)
			res := Check(tc.entries, map[string]*lease.Lease{"x": &f})
			if res.Count != 0 {
				t.Fatalf("violations in a legal history: %v", res.Violations)
			}
			if lin := Linearizable(tc.entries, 10*time.Second); lin.Result != porcupine.Ok {
				t.Fatalf("porcupine: %v, want Ok", lin.Result)
			}
		})
	}
}

func TestSuccessionViolations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"checkpoint from a stale token", succession(func(es []Entry) []Entry {
			// a releases its ended holding with a checkpoint after b acquired.
			return append(es[:5:5], Entry{Client: 1, Op: Release, Holder: "a", Token: 1, Checkpoint: json.RawMessage(`{"n":9}`), Outcome: OK,
				Lease: withCP(mk("a", 1, 1000, 0, 300, 500, 750), `{"n":9}`, 1)})
		}), "a checkpoint from a stale holding"},
		{"checkpoint from a stale token, by real time only", succession(func(es []Entry) []Entry {
			// answered at server time 650, before b's acquisition at 700, but
			// sent after b's acquire was answered.
			return append(es[:5:5], Entry{Client: 1, Op: Release, Holder: "a", Token: 1, Checkpoint: json.RawMessage(`{"n":9}`), Outcome: OK,
				Lease: withCP(mk("a", 1, 1000, 0, 300, 500, 650), `{"n":9}`, 1)})
		}), "had answered token 2 before it was sent"},
		{"acknowledged checkpoint lost: an older one inherited", succession(func(es []Entry) []Entry {
			es[6].Lease = withCP(mk("c", 3, 1000, 900, 900, 1900, 900), `{"n":2}`, 1)
			return es
		}), "an acknowledged checkpoint was lost"},
		{"acknowledged checkpoint lost: an older one of the same holding inherited", succession(func(es []Entry) []Entry {
			es[4].Lease = withCP(mk("b", 2, 1000, 700, 700, 1700, 700), `{"n":1}`, 1)
			return es
		}), "an acknowledged checkpoint was lost"},
		{"acknowledged checkpoint lost: none inherited", succession(func(es []Entry) []Entry {
			es[6].Lease = mk("c", 3, 1000, 900, 900, 1900, 900)
			return es
		}), "an acknowledged checkpoint was lost"},
		{"checkpoint never written", succession(func(es []Entry) []Entry {
			es[6].Lease = withCP(mk("c", 3, 1000, 900, 900, 1900, 900), `{"n":7}`, 2)
			return es
		}), "which no write of that holding sent"},
		{"acknowledged write answered another checkpoint", succession(func(es []Entry) []Entry {
			es[5].Lease = withCP(mk("b", 2, 1000, 700, 700, 800, 800), `{"n":2}`, 1)
			return es
		}), "must answer its checkpoint"},
		{"reservation broken: another acquired in the window", succession(func(es []Entry) []Entry {
			es[4] = Entry{Client: 3, Op: Acquire, Holder: "c", TTL: time.Second, Outcome: OK,
				Lease: withCP(mk("c", 2, 1000, 700, 700, 1700, 700), `{"n":2}`, 1)}
			return es[:5]
		}), "a broken reservation"},
		{"reservation broken: the successor refused for another", succession(func(es []Entry) []Entry {
			es[3] = Entry{Client: 2, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: Reserved,
				Lease: reservedFor(withCP(mk("a", 1, 1000, 0, 300, 500, 600), `{"n":2}`, 1), "c", 5500)}
			return es
		}), "a broken reservation"},
		{"transfer answered without its reservation", succession(func(es []Entry) []Entry {
			es[2].Lease = withCP(mk("a", 1, 1000, 0, 300, 500, 500), `{"n":2}`, 1)
			return es
		}), "must show the lease reserved"},
		{"release of one's own holding refused", succession(func(es []Entry) []Entry {
			es[5] = Entry{Client: 2, Op: Release, Holder: "b", Token: 2, Outcome: Lost}
			es[6] = Entry{Client: 3, Op: Get, Outcome: OK, Lease: withCP(mk("b", 2, 1000, 700, 700, 1700, 900), `{"n":2}`, 1)}
			return es
		}), "was answered lease_lost"},
		{"lease_reserved of a held lease", succession(func(es []Entry) []Entry {
			es[3].Lease = reservedFor(mk("a", 1, 1000, 0, 300, 1300, 400), "b", 5500)
			es[2], es[3] = es[3], es[2]
			return es
		}), "lease_reserved must show a free lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.entries, nil)
			found := false
			for _, v := range res.Violations {
				found = found || strings.Contains(v.String(), tc.want)
			}
			if !found {
				t.Fatalf("Check found %v, want a violation saying %q", res.Violations, tc.want)
			}
		})
	}
}

// runSuccession drives contenders against a Manager over the memory
// backend as run does, using docs/contract.md §8: a third of the acquires
// are candidates that wait with a random priority, some asking to
// preempt; a holding renews with checkpoints, steps down when asked, and
// ends with a release with a checkpoint, a transfer to another contender or
// by expiring. dropAnswers is as at run.
func runSuccession(t *testing.T, contenders int, d time.Duration, dropAnswers float64) ([]Entry, map[string]*lease.Lease) {
	t.Helper()
	names := []string{"s.one", "s.two"}
	return drive(t, names, 11, contenders, d, dropAnswers, viaWire,
		func(ctx context.Context, m *lease.Manager, c int, rng *rand.Rand, name, holder string, do func(Entry, func() (lease.Lease, error)) (lease.Lease, bool)) {
			const ttl = 20 * time.Millisecond
			n := 0
			checkpoint := func(token int64) json.RawMessage {
				n++
				return fmt.Appendf(nil, `{"token":%d,"n":%d}`, token, n)
			}
			for ctx.Err() == nil {
				req := lease.AcquireRequest{Name: name, Holder: holder, TTL: ttl}
				if rng.IntN(3) == 0 {
					req.Wait = time.Duration(10+rng.IntN(30)) * time.Millisecond
					req.Candidate, req.Priority, req.Preempt = true, rng.IntN(11), rng.IntN(2) == 0
				}
				l, ok := do(Entry{Op: Acquire, TTL: ttl, Priority: req.Priority, Preempt: req.Preempt}, func() (lease.Lease, error) {
					return m.Acquire(context.Background(), req)
				})
				if !ok {
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					continue
				}
				token, yield := l.FencingToken, l.YieldTo()
				for range rng.IntN(4) {
					if yield != "" {
						break
					}
					time.Sleep(time.Duration(rng.IntN(6000)) * time.Microsecond)
					cp := checkpoint(token)
					if r, ok := do(Entry{Op: Renew, Token: token, Checkpoint: cp}, func() (lease.Lease, error) {
						return m.Renew(context.Background(), lease.RenewRequest{Name: name, Holder: holder, FencingToken: token, Checkpoint: cp})
					}); ok {
						yield = r.YieldTo()
					}
				}
				cp := checkpoint(token)
				switch k := rng.IntN(3); {
				case yield != "" || k == 0:
					do(Entry{Op: Release, Token: token, Checkpoint: cp}, func() (lease.Lease, error) {
						return m.Release(context.Background(), lease.ReleaseRequest{Name: name, Holder: holder, FencingToken: token, Checkpoint: cp})
					})
				case k == 1:
					to := fmt.Sprintf("c%d", (c+len(names)*(1+rng.IntN(contenders/len(names)-1)))%contenders)
					reserve := time.Duration(5+rng.IntN(20)) * time.Millisecond
					do(Entry{Op: Transfer, Token: token, To: to, Checkpoint: cp}, func() (lease.Lease, error) {
						return m.Transfer(context.Background(), lease.TransferRequest{Name: name, Holder: holder, FencingToken: token, To: to, Checkpoint: cp, Reserve: reserve})
					})
				}
			}
		})
}

// viaWire returns l as a client of the HTTP API reads it: the reservation
// computed at its server time is in ReservedFor and ReservedUntil.
func viaWire(t *testing.T, l lease.Lease) lease.Lease {
	out, err := wire.FromLease(l).ToLease()
	if err != nil {
		t.Errorf("wire form of %+v: %v", l, err)
	}
	return out
}

// TestValidSuccessionHistories: histories of the memory backend with
// candidates, preemption, checkpoints and transfers pass both checks.
func TestValidSuccessionHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop float64
	}{{"all answered", 0}, {"some answers lost", 0.05}} {
		t.Run(tc.name, func(t *testing.T) {
			entries, finals := runSuccession(t, 8, 500*time.Millisecond, tc.drop)
			res := checkValid(t, entries, finals)
			counts := map[string]int{}
			for _, e := range entries {
				if e.Outcome != OK && e.Outcome != Reserved {
					continue
				}
				switch {
				case e.Op == Transfer && e.Outcome == OK:
					counts["transfers"]++
				case e.Outcome == Reserved:
					counts["lease_reserved"]++
				case e.Op == Renew && e.Lease.YieldTo() != "" || e.Op == Renew && e.Lease.ReservedFor != "":
				case e.Op == Acquire && e.Preempt:
					counts["preempting candidates led"]++
				}
				if e.Op == Acquire && e.Outcome == OK && e.Lease.Checkpoint != nil {
					counts["checkpoints inherited"]++
				}
			}
			for _, k := range []string{"transfers", "lease_reserved", "checkpoints inherited"} {
				if counts[k] == 0 {
					t.Errorf("no %s: the run exercised too little (%v)", k, counts)
				}
			}
			t.Logf("%d ops %v, %d holdings, %v", len(entries), res.Ops, res.Holdings, counts)
		})
	}
}
