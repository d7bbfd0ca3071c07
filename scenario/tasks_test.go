package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// sink is the downstream system the agents write to. It accepts a write
// only with a fencing token at least the highest it has seen, as every
// downstream of a leasesvc leader must.
type sink struct {
	mu      sync.Mutex
	highest int64
	writes  map[int]int         // task → accepted writes
	order   []int64             // tokens of accepted writes, in order
	byToken map[int64]int       // accepted writes per token
	first   map[int64]time.Time // first accepted write per token
	refused int                 // writes refused for a stale token
}

func newSink() *sink {
	return &sink{writes: map[int]int{}, byToken: map[int64]int{}, first: map[int64]time.Time{}}
}

// fence records token as seen without writing, as a new leader does first:
// from then on every write of an older holding is refused. It reports
// whether token is still current.
func (s *sink) fence(token int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		return false
	}
	s.highest = token
	return true
}

// write records task as done by token, unless token is stale.
func (s *sink) write(token int64, task int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.highest {
		s.refused++
		return false
	}
	s.highest = token
	s.writes[task]++
	s.order = append(s.order, token)
	if s.byToken[token] == 0 {
		s.first[token] = time.Now()
	}
	s.byToken[token]++
	return true
}

// done returns which tasks have an accepted write.
func (s *sink) done(n int) []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, n)
	for task := range s.writes {
		out[task] = true
	}
	return out
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

func (s *sink) tokenNow() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest
}

// agent is one participant: an Elector through a proxy of its own, and the
// coordinator work it does while leading.
type agent struct {
	name   string
	px     *proxy
	e      *client.Elector
	zombie atomic.Bool // set: act like a paused process that wakes up late
	terms  atomic.Int32
}

// TestFiveAgentsThousandTasks: five agents share 1,000 tasks through a
// fencing sink; the leader is killed twice mid-run, once cut off from the
// service (it stops at its safe deadline) and once cut off and frozen like
// a paused process that writes after it woke (the sink refuses that write).
// Every task is done exactly once and no stale write is accepted.
func TestFiveAgentsThousandTasks(t *testing.T) {
	const (
		agents = 5
		tasks  = 1000
		ttl    = time.Second
		work   = 4 * time.Millisecond // per task
	)
	svc := e2e.StartService(t, serviceEnv)
	name := e2e.UniqueName("coordinator")
	s := newSink()
	allDone := make(chan struct{})
	var closeAll sync.Once
	var leaderChanges atomic.Int32
	var mu sync.Mutex
	leaderOf := map[int64]*agent{} // token → agent

	team := make([]*agent, agents)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := time.Now()
	for i := range team {
		a := &agent{name: fmt.Sprintf("agent-%d", i+1), px: newProxy(t, svc.URL[len("http://"):])}
		team[i] = a
		e, err := client.NewElector(newClient(t, a.px.URL()), name, client.ElectorConfig{
			Holder: a.name, TTL: ttl, Wait: 10 * time.Second,
			OnNewLeader: func(string) {},
			OnStartedLeading: func(lctx context.Context) {
				token, _ := client.TokenFromContext(lctx)
				a.terms.Add(1)
				leaderChanges.Add(1)
				mu.Lock()
				leaderOf[token] = a
				mu.Unlock()
				coordinate(lctx, a, token, s, tasks, work, func() { closeAll.Do(func() { close(allDone) }) })
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		a.e = e
		wg.Go(func() {
			if err := e.Run(ctx); err != nil {
				t.Errorf("%s: Run = %v", a.name, err)
			}
		})
	}

	// The killer: at a third and at two thirds of the tasks, cut the leader
	// off; the second time it also freezes like a paused process.
	var kills []string
	cuts := map[int64]time.Time{} // token of the leader cut off → when
	killAt := func(n int, zombie bool) {
		eventually(t, 30*time.Second, fmt.Sprintf("%d tasks done", n), func() bool { return s.count() >= n })
		mu.Lock()
		leader := leaderOf[s.tokenNow()]
		mu.Unlock()
		if zombie {
			leader.zombie.Store(true)
		}
		cuts[s.tokenNow()] = time.Now()
		leader.px.Cut()
		kills = append(kills, fmt.Sprintf("%s (token %d) at %d tasks, zombie %v", leader.name, s.tokenNow(), s.count(), zombie))
	}
	killAt(tasks/3, false)
	killAt(2*tasks/3, true)
	select {
	case <-allDone:
	case <-time.After(60 * time.Second):
		t.Fatalf("not done in 60s: %d tasks", s.count())
	}
	elapsed := time.Since(start)
	time.Sleep(1500 * time.Millisecond) // the zombie wakes and tries its late write
	cancel()
	wg.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	for task := range tasks {
		if s.writes[task] != 1 {
			t.Errorf("task %d done %d times, want exactly once", task, s.writes[task])
		}
	}
	staleAccepted := 0
	for i := 1; i < len(s.order); i++ {
		if s.order[i] < s.order[i-1] {
			staleAccepted++
		}
	}
	if staleAccepted != 0 {
		t.Errorf("%d stale writes accepted", staleAccepted)
	}
	if s.refused < 1 {
		t.Errorf("the frozen leader's late write was not refused (refused %d)", s.refused)
	}
	if leaderChanges.Load() < 3 {
		t.Errorf("%d terms of leadership, want at least 3 (two kills)", leaderChanges.Load())
	}
	var gaps []string
	for tok, at := range cuts {
		if next, ok := s.first[tok+1]; ok {
			gaps = append(gaps, fmt.Sprintf("token %d cut → token %d's first write: %v", tok, tok+1, next.Sub(at).Round(time.Millisecond)))
		}
	}
	t.Logf("scenario: %d agents, %d tasks in %v; %d terms of leadership (%d leader changes); kills: %v; writes per token %v; takeovers: %v; stale writes refused %d, accepted %d",
		agents, tasks, elapsed.Round(time.Millisecond), leaderChanges.Load(), leaderChanges.Load()-1, kills, s.byToken, gaps, s.refused, staleAccepted)
}

// coordinate is the leader's work: announce the token to the sink, read
// what is done, then do the rest one task at a time, stopping as soon as
// the leading ctx is done. A zombie ignores ctx for the task in hand, like
// a process paused mid-task, and writes it after another leader took over.
func coordinate(ctx context.Context, a *agent, token int64, s *sink, tasks int, work time.Duration, finished func()) {
	if !s.fence(token) {
		return
	}
	done := s.done(tasks)
	for task := range tasks {
		if done[task] {
			continue
		}
		if a.zombie.Load() {
			// Paused mid-task until well after a newer holder wrote.
			deadline := time.Now().Add(10 * time.Second)
			for s.tokenNow() <= token && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			s.write(token, task) // refused: stale token
			return
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(work)
		if !s.write(token, task) {
			return
		}
	}
	finished()
	<-ctx.Done()
}
