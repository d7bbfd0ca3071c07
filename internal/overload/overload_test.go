package overload_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/overload"
)

// fake is a memory reading the test sets.
type fake struct{ v atomic.Int64 }

func (f *fake) sample() int64 { return f.v.Load() }

// sheds records what was shed.
type sheds struct {
	mu  sync.Mutex
	got []string
	n   sync.WaitGroup
}

func (s *sheds) fn(name string) func(overload.Level) {
	s.n.Add(1)
	return func(overload.Level) {
		s.mu.Lock()
		s.got = append(s.got, name)
		s.mu.Unlock()
		s.n.Done()
	}
}

func (s *sheds) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.got))
}

// waitFor waits until want entries were shed.
func (s *sheds) waitFor(t *testing.T, want int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l := s.list(); len(l) >= want {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("shed %v; want %d", s.list(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func newManager(t *testing.T, f *fake, heaviest func(int) []string) (*overload.Manager, *[]string) {
	t.Helper()
	var levels []string
	m, err := overload.New(overload.Config{Soft: 100, Hard: 200, Sample: f.sample, Heaviest: heaviest,
		OnLevel: func(from, to overload.Level, _ int64) { levels = append(levels, from.String()+">"+to.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	return m, &levels
}

// TestLevels: the level follows the thresholds, and leaves one only below
// 15/16 of it.
func TestLevels(t *testing.T) {
	f := &fake{}
	m, levels := newManager(t, f, nil)
	for _, step := range []struct {
		used int64
		want overload.Level
	}{
		{50, overload.Normal}, {100, overload.Soft}, {95, overload.Soft}, {90, overload.Normal},
		{250, overload.Hard}, {190, overload.Hard}, {180, overload.Soft}, {99, overload.Soft}, {10, overload.Normal},
	} {
		f.v.Store(step.used)
		if got := m.Check(); got != step.want || m.Level() != step.want {
			t.Fatalf("at %d bytes: level %v; want %v", step.used, got, step.want)
		}
	}
	want := []string{"normal>soft", "soft>normal", "normal>hard", "hard>soft", "soft>normal"}
	if !slices.Equal(*levels, want) {
		t.Fatalf("level changes %v; want %v", *levels, want)
	}
	if _, err := overload.New(overload.Config{Soft: 10, Hard: 10}); err == nil {
		t.Fatal("soft = hard accepted")
	}
}

// TestSoftShedsOldestWaitsAndStreams: past Soft, waits and streams are
// shed oldest first, a fraction a sample; sockets are not; below it
// nothing is.
func TestSoftShedsOldestWaitsAndStreams(t *testing.T) {
	f := &fake{}
	m, _ := newManager(t, f, nil)
	s := &sheds{}
	m.Register("a", overload.KindSocket, s.fn("socket-a"))
	for i := range 16 {
		m.Register("a", overload.KindStream, s.fn(string(rune('A'+i))))
	}
	unreg := m.Register("b", overload.KindWait, s.fn("gone"))
	unreg() // ended by itself: never shed
	f.v.Store(50)
	m.Check()
	if l := s.list(); len(l) != 0 {
		t.Fatalf("shed %v below the soft threshold", l)
	}
	f.v.Store(150)
	m.Check()
	if l := s.waitFor(t, 2); !slices.Equal(l, []string{"A", "B"}) {
		t.Fatalf("first sample past soft shed %v; want the two oldest [A B]", l)
	}
	for range 20 {
		m.Check()
	}
	if l := s.waitFor(t, 16); slices.Contains(l, "socket-a") || slices.Contains(l, "gone") {
		t.Fatalf("soft shed %v: a socket or an unregistered entry", l)
	}
}

// TestHardShedsTheHeaviestCaller: past Hard, everything of the heaviest
// caller by the budget goes, its sockets included, and nobody else's
// socket.
func TestHardShedsTheHeaviestCaller(t *testing.T) {
	f := &fake{}
	m, _ := newManager(t, f, func(int) []string { return []string{"nobody", "heavy", "light"} })
	s := &sheds{}
	m.Register("light", overload.KindSocket, s.fn("light-socket"))
	m.Register("heavy", overload.KindSocket, s.fn("heavy-socket"))
	m.Register("heavy", overload.KindSocket, s.fn("heavy-socket2"))
	f.v.Store(500)
	m.Check()
	if l := s.waitFor(t, 2); !slices.Equal(l, []string{"heavy-socket", "heavy-socket2"}) {
		t.Fatalf("hard shed %v; want the heavy caller's sockets", l)
	}
	m.Check()
	if l := s.waitFor(t, 3); !slices.Contains(l, "light-socket") {
		t.Fatalf("the next sample shed %v; want the next caller's", l)
	}
}

// TestInUseReadsTheRuntime: the runtime's figure moves with what is
// allocated and live.
func TestInUseReadsTheRuntime(t *testing.T) {
	before := overload.InUse()
	keep := make([][]byte, 64)
	for i := range keep {
		keep[i] = make([]byte, 1<<20)
		keep[i][0] = 1
	}
	after := overload.InUse()
	if after < before+32<<20 {
		t.Fatalf("64 MiB allocated moved InUse from %d to %d", before, after)
	}
	_ = keep[63][0]
	var nilM *overload.Manager
	if nilM.Level() != overload.Normal {
		t.Fatal("a nil manager is not normal")
	}
	nilM.Register("x", overload.KindWait, func(overload.Level) {})()
}
