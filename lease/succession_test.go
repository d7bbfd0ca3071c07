package lease

import (
	"testing"
	"time"
)

func TestCandidateRanking(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := func(holder string, prio int, since time.Duration) Candidate {
		return Candidate{ID: holder, Holder: holder, Priority: prio, Since: t0.Add(since), Until: t0.Add(time.Hour)}
	}
	for _, tc := range []struct {
		name string
		a, b Candidate
	}{
		{"higher priority first, whatever its arrival", c("z", 10, time.Second), c("a", 5, 0)},
		{"equal priority: the earlier waiter", c("z", 5, 0), c("a", 5, time.Millisecond)},
		{"equal priority and start: byte order of holder", c("B", 5, 0), c("a", 5, 0)},
	} {
		if !better(tc.a, tc.b) || better(tc.b, tc.a) {
			t.Errorf("%s: want %s before %s", tc.name, tc.a.Holder, tc.b.Holder)
		}
	}
}

func TestReservationWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Record{Name: "x", Holder: "h", FencingToken: 3, TTL: time.Minute, ExpireTime: t0, Priority: 1,
		Candidates: []Candidate{
			{ID: "1", Holder: "low", Priority: 1, Since: t0.Add(-time.Minute), Until: t0.Add(time.Minute)},
			{ID: "2", Holder: "short", Priority: 9, Since: t0.Add(-time.Minute), Until: t0.Add(2 * time.Second)},
			{ID: "3", Holder: "gone", Priority: 99, Since: t0.Add(-time.Minute), Until: t0.Add(-time.Second)},
		}}
	for _, tc := range []struct {
		at    time.Duration
		who   string
		until time.Duration
	}{
		{-time.Second, "", 0},                   // held: never reserved
		{0, "short", 2 * time.Second},           // the best live one, no longer than its registration
		{2 * time.Second, "low", ReserveWindow}, // the next best once it lapsed
		{ReserveWindow, "", 0},                  // the window is over: open
	} {
		who, until := ViewAt(r, t0.Add(tc.at)).Reservation()
		if who != tc.who || tc.who != "" && !until.Equal(t0.Add(tc.until)) {
			t.Errorf("at %v: reserved for %q until %v, want %q until %v", tc.at, who, until, tc.who, t0.Add(tc.until))
		}
	}
	tr := *r
	tr.ReservedFor, tr.ReservedUntil = "succ", t0.Add(30*time.Second)
	if who, _ := ViewAt(&tr, t0.Add(10*time.Second)).Reservation(); who != "succ" {
		t.Errorf("a transfer's reservation after the window: %q, want succ", who)
	}
	held := *r
	held.ExpireTime = t0.Add(time.Hour)
	held.Candidates = append(held.Candidates, Candidate{ID: "4", Holder: "pre", Priority: 2, Preempt: true, Since: t0, Until: t0.Add(time.Minute)})
	if got := ViewAt(&held, t0).YieldTo(); got != "pre" {
		t.Errorf("YieldTo = %q, want pre (the only preempting candidate above priority 1)", got)
	}
	held.Priority = 2
	if got := ViewAt(&held, t0).YieldTo(); got != "" {
		t.Errorf("YieldTo with an equal priority = %q, want none", got)
	}
}

// TestBestCandidatePriority: the priority of the best live candidate, 0
// included, and none when no registration is live.
func TestBestCandidatePriority(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &Record{Name: "x", Holder: "h", FencingToken: 1, TTL: time.Minute, ExpireTime: t0.Add(time.Minute),
		Candidates: []Candidate{
			{ID: "1", Holder: "zero", Priority: 0, Since: t0, Until: t0.Add(time.Minute)},
			{ID: "2", Holder: "best", Priority: 7, Since: t0, Until: t0.Add(10 * time.Second)},
		}}
	for _, tc := range []struct {
		at   time.Duration
		prio int
		ok   bool
	}{{0, 7, true}, {10 * time.Second, 0, true}, {time.Minute, 0, false}} {
		p, ok := ViewAt(r, t0.Add(tc.at)).BestCandidatePriority()
		if p != tc.prio || ok != tc.ok {
			t.Errorf("at %v: BestCandidatePriority = %d, %v; want %d, %v", tc.at, p, ok, tc.prio, tc.ok)
		}
	}
}
