package scenario

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// issuer is the service's name in its proofs (LEASESVC_PROOF_ISSUER),
// set so that the sink's verifier does not depend on the default.
const issuer = "leasesvc-scenario"

// sink is the downstream system the agents write to. It accepts a write
// only with a proof the service signed for its lease whose fencing token
// is at least the highest it has admitted (a fence.Guard over the
// service's JWKS), as every downstream of a leasesvc leader must: a bare
// number or a token signed by any other key is refused however high.
type sink struct {
	lease string
	guard *fence.Guard

	mu      sync.Mutex
	writes  map[int]int         // task → accepted writes
	order   []int64             // tokens of accepted writes, in order
	byToken map[int64]int       // accepted writes per token
	first   map[int64]time.Time // first accepted write per token
	refused int                 // writes refused for a stale token
	forged  []string            // fence.Reason of proofs refused as not the service's
	checked e2e.Changes         // notified at each proof checked
}

// newSink returns a sink of lease that verifies proofs with the keys of
// the service at url.
func newSink(t testing.TB, url, lease string) *sink {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	v, err := fence.NewVerifier(&fence.RemoteKeys{URL: url + "/.well-known/jwks.json", Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	return &sink{lease: lease, guard: fence.NewGuard(v),
		writes: map[int]int{}, byToken: map[int64]int{}, first: map[int64]time.Time{}}
}

// admit checks proof with the Guard (under s.mu, so that admitting and
// recording are one step) and returns its token; refusals are counted by
// reason. The sink is a system of its own: a writer giving up does not
// cancel its check (a key fetch cut short would count as a refusal).
func (s *sink) admit(proof string) (int64, bool) {
	c, err := s.guard.Check(context.Background(), s.lease, proof)
	s.checked.Notify()
	switch reason := fence.Reason(err); reason {
	case "":
		return c.FencingToken, true
	case "stale":
		s.refused++
	default:
		s.forged = append(s.forged, reason)
	}
	return 0, false
}

// fence admits proof without writing, as a new leader does first: from
// then on every write of an older holding is refused. It reports whether
// the proof is admitted.
func (s *sink) fence(proof string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.admit(proof)
	return ok
}

// write records task as done by the holder of proof, unless the Guard
// refuses the proof.
func (s *sink) write(proof string, task int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	token, ok := s.admit(proof)
	if !ok {
		return false
	}
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

// await returns once cond (called under s.mu) holds, testing it after each
// proof the sink checks, and reports false if limit passed first.
func (s *sink) await(limit time.Duration, cond func() bool) bool {
	return s.checked.Await(limit, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return cond()
	})
}

// tokenNow is the highest token the sink has admitted.
func (s *sink) tokenNow() int64 { return s.guard.Highest(s.lease) }

// forgeries are two proofs of lease for token that an agent could invent
// (hallucinated, or copied from an old transcript): the bare number, and a
// well-formed proof signed by a key the service never had.
func forgeries(t testing.TB, lease string, token int64) []string {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := fence.Sign(priv, fence.KeyID(pub), fence.Claims{Lease: lease, FencingToken: token,
		Holder: "forger", IssuedAt: time.Now().Unix(), Issuer: issuer})
	if err != nil {
		t.Fatal(err)
	}
	return []string{strconv.FormatInt(token, 10), jws}
}

// agent is one participant: an Elector through a proxy of its own, and the
// coordinator work it does while leading.
type agent struct {
	name   string
	px     *proxy
	e      *client.Elector
	zombie atomic.Bool // set: act like a paused process that wakes up late
	late   chan error  // a zombie's late write: nil if refused (buffered)
	terms  atomic.Int32
}

// TestFiveAgentsThousandTasks: five agents share 1,000 tasks through a sink
// fenced with proofs (each leader writes with its term's proof,
// client.ProofFromContext); the leader is killed twice mid-run, once cut
// off from the service (it stops at its safe deadline) and once cut off and
// frozen like a paused process that writes after it woke (the sink refuses
// that write). Halfway, two writes are forged with a token 1,000 above the
// leader's, a bare number and a proof signed by a key the service never
// published: both are refused and the true leader goes on. Every task is
// done exactly once and no stale write is accepted.
func TestFiveAgentsThousandTasks(t *testing.T) {
	const (
		agents = 5
		tasks  = 1000
		ttl    = time.Second
		work   = 4 * time.Millisecond // per task
	)
	env := maps.Clone(serviceEnv)
	env["LEASESVC_PROOF_ISSUER"] = issuer // proofs are always on; their issuer is set
	svc := e2e.StartService(t, env)
	name := e2e.UniqueName("coordinator")
	s := newSink(t, svc.URL, name)
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
		a := &agent{name: fmt.Sprintf("agent-%d", i+1), px: newProxy(t, svc.URL[len("http://"):]), late: make(chan error, 1)}
		team[i] = a
		e, err := newClient(t, a.px.URL()).NewElector(name, client.ElectorConfig{
			Holder: a.name, Wait: 10 * time.Second,
			Callbacks: client.LeaderCallbacks{
				OnNewLeader: func(string) {},
				OnStartedLeading: func(lctx context.Context) {
					token, _ := client.TokenFromContext(lctx)
					proof, ok := client.ProofFromContext(lctx)
					if !ok {
						t.Errorf("%s: the leading ctx of token %d carries no proof", a.name, token)
						return
					}
					a.terms.Add(1)
					leaderChanges.Add(1)
					mu.Lock()
					leaderOf[token] = a
					mu.Unlock()
					coordinate(lctx, a, string(proof), token, s, tasks, work, func() { closeAll.Do(func() { close(allDone) }) })
				},
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
	var zombie *agent
	cuts := map[int64]time.Time{} // token of the leader cut off → when
	killAt := func(n int, freeze bool) {
		eventually(t, 30*time.Second, fmt.Sprintf("%d tasks done", n), func() bool { return s.count() >= n })
		mu.Lock()
		leader := leaderOf[s.tokenNow()]
		mu.Unlock()
		if freeze {
			zombie = leader
			leader.zombie.Store(true)
		}
		cuts[s.tokenNow()] = time.Now()
		leader.px.Cut()
		kills = append(kills, fmt.Sprintf("%s (token %d) at %d tasks, zombie %v", leader.name, s.tokenNow(), s.count(), freeze))
	}
	// The forger: halfway, two writes of a task not yet done, with a token
	// far above the leader's, that an agent could invent or copy.
	var forgedAt, leaderWritesAt int
	var forgedLeader int64
	forge := func(n int) {
		eventually(t, 30*time.Second, fmt.Sprintf("%d tasks done", n), func() bool { return s.count() >= n })
		done := s.done(tasks)
		task := tasks - 1
		for task > 0 && done[task] {
			task--
		}
		s.mu.Lock()
		forgedLeader, forgedAt = s.guard.Highest(name), len(s.order)
		leaderWritesAt = s.byToken[forgedLeader]
		s.mu.Unlock()
		for _, p := range forgeries(t, name, forgedLeader+1000) {
			if s.write(p, task) {
				t.Fatalf("a forged write of token %d was accepted: %.40s…", forgedLeader+1000, p)
			}
		}
	}
	killAt(tasks/3, false)
	forge(tasks / 2)
	killAt(2*tasks/3, true)
	select {
	case <-allDone:
	case <-time.After(60 * time.Second):
		t.Fatalf("not done in 60s: %d tasks", s.count())
	}
	elapsed := time.Since(start)
	select { // the zombie wakes and tries its late write
	case err := <-zombie.late:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(15 * time.Second):
		t.Error("the zombie did not try its late write within 15s of the last task")
	}
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
	if len(s.forged) != 2 || s.forged[0] != "malformed" || s.forged[1] != "unknown_key" {
		t.Errorf("forged writes refused for %v, want [malformed unknown_key] (a bare number, an unknown key)", s.forged)
	}
	if s.byToken[forgedLeader] <= leaderWritesAt {
		t.Errorf("the leader of token %d wrote nothing after the forged writes (%d writes before)", forgedLeader, leaderWritesAt)
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
	t.Logf("scenario: %d agents, %d tasks in %v; %d terms of leadership (%d leader changes); kills: %v; writes per token %v; takeovers: %v; stale writes refused %d, accepted %d; forged writes (token %d) after %d writes refused as %v, token %d went on with %d more",
		agents, tasks, elapsed.Round(time.Millisecond), leaderChanges.Load(), leaderChanges.Load()-1, kills, s.byToken, gaps, s.refused, staleAccepted,
		forgedLeader+1000, forgedAt, s.forged, forgedLeader, s.byToken[forgedLeader]-leaderWritesAt)
}

// coordinate is the leader's work: present the term's proof to the sink,
// read what is done, then do the rest one task at a time, each write with
// the proof, stopping as soon as the leading ctx is done. A zombie ignores
// ctx for the task in hand, like a process paused mid-task, and writes it
// after another leader took over. token is the proof's, to tell a newer
// holder's writes.
func coordinate(ctx context.Context, a *agent, proof string, token int64, s *sink, tasks int, work time.Duration, finished func()) {
	if !s.fence(proof) {
		return
	}
	done := s.done(tasks)
	for task := range tasks {
		if done[task] {
			continue
		}
		if a.zombie.Load() {
			// Paused mid-task until after a newer holder's proof.
			s.await(10*time.Second, func() bool { return s.guard.Highest(s.lease) > token })
			var err error
			if s.write(proof, task) { // refused: stale token
				err = fmt.Errorf("%s's late write of task %d with token %d was accepted", a.name, task, token)
			}
			select {
			case a.late <- err:
			default: // told already
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		time.Sleep(work)
		if !s.write(proof, task) {
			return
		}
	}
	finished()
	<-ctx.Done()
}
