package emulatortests

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/anishathalye/porcupine"
	"github.com/rs/zerolog"

	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/history"
	"github.com/leasesvc/leasesvc/lease"
)

// safetyConfig describes one safety run.
type safetyConfig struct {
	// backend names the backend in messages.
	backend string
	// upstream is the emulator's host:port; hostEnv the variable through
	// which an instance finds it (each instance gets its own proxy there).
	upstream, hostEnv string
	// env is the instances' environment, besides hostEnv.
	env map[string]string
	// topic is the events topic (recreated after a Pub/Sub restart).
	topic string
	// instances, contenders and leases: how many of each.
	instances, contenders, leases int
	// ttl is the contenders' TTL; pollMin–pollMax the pause of a refused
	// contender before it tries again.
	ttl, pollMin, pollMax time.Duration
	// duration is how long the contenders run.
	duration time.Duration
	// upstreamValue, if set, makes the value of hostEnv from the address of
	// an instance's proxy (a connection URL); unset, it is the address.
	upstreamValue func(addr string) string
	// faults replaces the default faults (faults), if set.
	faults []fault
	// sessions is the number of session contenders (sessionContender),
	// spread over the leases; with any, the agents' sockets go through a
	// front proxy per instance, whose faults (sessionFaults) run beside the others.
	sessions int
}

// safetyRun is the state of one run.
type safetyRun struct {
	cfg    safetyConfig
	ctx    context.Context // the test's: its end stops the waits of faults (hold)
	insts  []*safetyInstance
	rec    history.Recorder
	stats  counters
	hc     *http.Client
	traces traces // the session agents'

	// sessions are the session contenders, for the faults that aim at
	// the agents on one instance; caps the resumes the frame proxies
	// carried; lateName the lease of the late-frames fault's agent.
	sessions []*sessionContender
	caps     captures
	lateName string
	// mainMu is held by each fault of the main track (injectFaults) and
	// by a session fault that needs them out of the way (lateFrames);
	// pauseMu by a pause and by each other session fault.
	mainMu, pauseMu sync.Mutex

	mu     sync.Mutex
	errors []string // answers the contract does not allow at all
	// What the faults aimed at sessions did (safety_pause_test.go,
	// safety_late_test.go).
	paused  pauseCounts
	refused int // late or replayed resumes refused
	tookOne int // ... that took the session: each is in errors too
}

// unexpected records an answer that no rule allows (a 400, a 500 body we
// cannot read): the run fails with it.
func (r *safetyRun) unexpected(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errors) < 50 {
		r.errors = append(r.errors, fmt.Sprintf(format, args...))
	}
}

// do sends req and reads the whole answer.
func (r *safetyRun) do(req *http.Request) (int, []byte, error) {
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, raw, nil
}

// safetyInstance is one leasesvc process whose connection to the backend
// goes through a fault proxy of its own.
type safetyInstance struct {
	idx   int
	proxy *toxiproxy.Proxy
	env   map[string]string

	// front carries the agents' sockets to the instance (cfg.sessions >
	// 0); frontMu serializes its faults with its retargeting after a
	// restart.
	front   *toxiproxy.Proxy
	frontMu sync.Mutex
	// frontURL is the front proxy's address, fixed when it first started.
	frontURL string
	// frames is the frame proxy in front of front: the agents dial it.
	frames *frameProxy

	mu  sync.Mutex
	svc *e2e.Service
}

func (in *safetyInstance) url() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.svc.URL
}

// safetyDuration is how long each safety run lasts:
// LEASESVC_SAFETY_DURATION (a Go duration, at least 10s) or 90 s, the
// least in which every fault of both tracks is injected once.
func safetyDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("LEASESVC_SAFETY_DURATION")
	if v == "" {
		return 90 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 10*time.Second {
		t.Fatalf("LEASESVC_SAFETY_DURATION=%q: want a Go duration of at least 10s, such as 10m", v)
	}
	return d
}

// runSafety runs contenders against several instances on one backend while
// faults are injected, then checks the history. It must run on the test's
// goroutine and not in parallel with tests that use Pub/Sub: it stops the
// Pub/Sub emulator.
func runSafety(t *testing.T, cfg safetyConfig, pubsubClient *pubsub.Client) {
	// Not beside the timing-bound freeze cases of sdk/conformance (see
	// e2e.Exclusive).
	e2e.Exclusive(t, "timing")
	r := &safetyRun{cfg: cfg, ctx: t.Context(), hc: &http.Client{Transport: &http.Transport{
		MaxIdleConns: 256, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second,
	}}}
	defer r.hc.CloseIdleConnections()
	var sub *subscriber // without Pub/Sub there are no events to check
	if pubsubClient != nil {
		sub = subscribe(t, pubsubClient, cfg.topic)
	}

	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	for i := range cfg.instances {
		p := toxiproxy.NewProxy(srv, fmt.Sprintf("backend-%d", i), "127.0.0.1:0", cfg.upstream)
		if err := p.Start(); err != nil {
			t.Fatalf("start fault proxy %d: %v", i, err)
		}
		t.Cleanup(p.Stop)
		env := map[string]string{cfg.hostEnv: p.Listen}
		if cfg.upstreamValue != nil {
			env[cfg.hostEnv] = cfg.upstreamValue(p.Listen)
		}
		for k, v := range cfg.env {
			env[k] = v
		}
		if cfg.sessions > 0 {
			env["LEASESVC_SESSION_LEASE_TTL"] = safetySessionTTL.String()
		}
		in := &safetyInstance{idx: i, proxy: p, env: env, svc: e2e.StartService(t, env)}
		if cfg.sessions > 0 {
			startFront(t, srv, in)
			startFrames(t, r, in)
		}
		r.insts = append(r.insts, in)
	}

	names := make([]string, cfg.leases)
	for i := range names {
		names[i] = e2e.UniqueName(fmt.Sprintf("safety%d", i))
	}
	r.lateName = e2e.UniqueName("safetylate")
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }() // also when a fault fails the test
	for i := range cfg.contenders {
		var peers []int
		for j := i % cfg.leases; j < cfg.contenders; j += cfg.leases {
			if j != i {
				peers = append(peers, j)
			}
		}
		c := &contender{id: i, name: names[i%cfg.leases], holder: fmt.Sprintf("c%02d", i), home: i % cfg.instances,
			rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i))), run: r, peers: peers}
		wg.Go(func() { c.loop(ctx) })
	}
	for i := range cfg.sessions {
		id := cfg.contenders + cfg.leases + i
		c := &sessionContender{id: id, name: names[i%cfg.leases], holder: fmt.Sprintf("s%02d", i), home: i % cfg.instances,
			rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id))), run: r}
		r.sessions = append(r.sessions, c)
		wg.Go(func() { c.loop(ctx) })
	}
	sdkLease, sdkReport := "", func() string { return "none" }
	if cfg.sessions > 0 {
		sdkLease = names[len(names)-1]
		sdkReport = r.startSDKAgents(t, ctx, sdkLease, &wg)
	}
	for i, name := range names { // one observer per lease
		o := &contender{id: cfg.contenders + i, name: name, home: i % cfg.instances,
			rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(cfg.contenders+i))), run: r}
		wg.Go(func() { o.observe(ctx) })
	}

	start := time.Now()
	lateReport := func() string { return "" }
	if cfg.sessions > 0 { // one instance's backend answers late (safety_lateanswers_test.go)
		lateReport = r.startLateAnswers(t, start.Add(cfg.duration))
	}
	type sessionLog struct {
		log []string
		err error
	}
	sessionFaultsDone := make(chan sessionLog, 1)
	if cfg.sessions > 0 { // beside the other faults, on the agents' sockets
		go func() {
			l, err := r.injectSessionFaults(start.Add(cfg.duration))
			sessionFaultsDone <- sessionLog{l, err}
		}()
	} else {
		sessionFaultsDone <- sessionLog{}
	}
	faults := r.injectFaults(t, start.Add(cfg.duration), pubsubClient)
	faultWait(r.ctx, time.Until(start.Add(cfg.duration))) // the fault-free tail
	sl := <-sessionFaultsDone
	if sl.err != nil {
		t.Errorf("session fault: %v", sl.err)
	}
	faults = append(faults, sl.log...)
	stop()
	wg.Wait()
	ran := time.Since(start)
	if cfg.sessions > 0 {
		faults = append(faults, "late answers: "+lateReport())
	}

	if cfg.sessions > 0 {
		names = append(names, r.lateName)
	}
	finals := r.finalReads(t, names, r.rec.Entries())
	entries := r.rec.Entries() // with the final reads

	// The exact check, with the leases the events carried as further
	// observations: an event that shows a holding the answers contradict
	// is a violation too.
	var events []*lease.Lease
	if sub != nil {
		events = sub.leases(names)
	}
	observed := slices.Clone(entries)
	for _, l := range events {
		observed = append(observed, history.Entry{Client: -2, Name: l.Name, Op: history.Get, Call: l.ServerTime, Return: l.ServerTime, Outcome: history.OK, Lease: l})
	}
	res := history.Check(observed, finals)
	pairs := checkAllPairs(observed)
	checkStart := time.Now()
	lin := history.Linearizable(withoutLease(entries, sdkLease), 30*time.Second) // per lease; a run out of time is reported, not failed
	linTook := time.Since(checkStart)

	t.Logf("%s: %d instances, %d contenders and %d session contenders on %d leases (ttl %v) for %v; faults: %s",
		cfg.backend, cfg.instances, cfg.contenders, cfg.sessions, cfg.leases, cfg.ttl, ran.Round(time.Second), strings.Join(faults, "; "))
	t.Logf("%s: %d operations, %d holdings, %d events checked; answers: %v", cfg.backend, len(entries), res.Holdings, len(events), r.stats.snapshot())
	t.Logf("%s: exact check: %d violations; all pairs: %d violations in %d pairs (%d holdings, %d terms); porcupine: %v in %v",
		cfg.backend, res.Count, pairs.count, pairs.pairs, pairs.holdings, pairs.terms, lin.Result, linTook.Round(time.Millisecond))
	if cfg.sessions > 0 {
		t.Logf("%s: SDK agents on %s (left out of porcupine): %s", cfg.backend, sdkLease, sdkReport())
		t.Logf("%s: pauses: %d session agents held on a paused instance, %d resumed elsewhere; late or replayed resumes refused: %d",
			cfg.backend, r.paused.pinned, r.paused.resumed, r.refused)
	}
	for _, msg := range r.errors {
		t.Errorf("unexpected answer: %s", msg)
	}
	report := func(kind string, vs []history.Violation) {
		for i, v := range vs {
			t.Errorf("%s: %s", kind, v)
			if i < 5 && !v.At.IsZero() {
				t.Logf("answers about %s within 1s of %s:\n%s", v.Lease, v.At.UTC().Format("15:04:05.000000"), history.Dump(observed, v.Lease, v.At, time.Second))
				if tr := r.traces.about(v.Msg, v.At, 5*time.Second); tr != "" {
					t.Logf("%s", tr)
				}
			}
		}
	}
	report("violation", res.Violations)
	report("violation (all pairs)", pairs.violations)
	r.checkExercised(t)
	switch lin.Result {
	case porcupine.Illegal:
		for _, name := range lin.Illegal {
			path := filepath.Join(os.TempDir(), "leasesvc-safety-"+name+".html")
			if err := history.Visualize(entries, name, path, time.Minute); err != nil {
				t.Errorf("porcupine: the history of %s is not linearizable (%v)", name, err)
				continue
			}
			t.Errorf("porcupine: the history of %s is not linearizable; visualization in %s", name, path)
		}
	case porcupine.Unknown:
		t.Logf("porcupine gave up (time limit) on %v; the exact check still applies", lin.Unknown)
	}
	if res.Holdings < cfg.leases*10 {
		t.Errorf("only %d holdings over %d leases: the run exercised too few hand-overs", res.Holdings, cfg.leases)
	}
}

// finalReads waits until no unanswered operation can still land (the
// service gives a request 10 s of backend time), then reads every lease.
func (r *safetyRun) finalReads(t *testing.T, names []string, entries []history.Entry) map[string]*lease.Lease {
	t.Helper()
	var lastMaybe time.Time
	for _, e := range entries {
		if e.Outcome == history.Maybe && e.Call.After(lastMaybe) {
			lastMaybe = e.Call
		}
	}
	if d := time.Until(lastMaybe.Add(12 * time.Second)); d > 0 {
		t.Logf("waiting %v for unanswered operations to land or time out", d.Round(time.Millisecond))
		if !faultWait(r.ctx, d) {
			t.Fatalf("the test ended while unanswered operations could still land: %v", r.ctx.Err())
		}
	}
	finals := map[string]*lease.Lease{}
	c := &contender{id: -1, run: r, rng: rand.New(rand.NewPCG(1, 2))}
	for _, name := range names {
		c.name = name
		deadline := time.Now().Add(time.Minute)
		for {
			e := c.get()
			if e.Outcome == history.OK || e.Outcome == history.NotFound {
				finals[name] = e.Lease
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("final read of %s: no answer in a minute", name)
			}
			if !faultWait(r.ctx, 200*time.Millisecond) { // before the next try
				t.Fatalf("final read of %s: %v", name, r.ctx.Err())
			}
		}
	}
	return finals
}

// leases returns the leases carried by the events received about names.
func (s *subscriber) leases(names []string) []*lease.Lease {
	var out []*lease.Lease
	for _, n := range names {
		for _, m := range s.of(n) {
			l, err := leaseOfEvent(m.data)
			if err == nil {
				out = append(out, l)
			}
		}
	}
	return out
}

// withoutLease returns the entries not about name.
func withoutLease(entries []history.Entry, name string) []history.Entry {
	out := make([]history.Entry, 0, len(entries))
	for _, e := range entries {
		if e.Name != name {
			out = append(out, e)
		}
	}
	return out
}

// faultWait waits d, or until ctx ends; it reports whether all of d
// passed. It is for the wall-clock waits of the fault harnesses: a fault's
// length, the quiet between faults, the span a late request could land in.
// Those waits are the faults themselves, not waits for an outcome; unlike
// a plain sleep they end with the test.
func faultWait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// faultPoll tests cond every 10 ms until it holds, limit has passed or ctx
// ends, and reports whether it held. It is for the fault harness's looks
// at state that sends no event (an agent leading, a frame held back, a
// session pinned to an instance), from the harness's own goroutine.
func faultPoll(ctx context.Context, limit time.Duration, cond func() bool) bool {
	end := time.NewTimer(limit)
	defer end.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-end.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}
