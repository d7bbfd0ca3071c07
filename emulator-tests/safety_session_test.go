package emulatortests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"

	"github.com/leasesvc/leasesvc/internal/history"
	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// safetySessionTTL is the instances' LEASESVC_SESSION_LEASE_TTL in the
// safety runs: short, so that the leases of a session whose instance was
// killed, and whose agent is gone too, free within the run, and so that
// the instances renew session leases (unseen by the history) every second.
const safetySessionTTL = 3 * time.Second

// sessionContender is a safety run's agent that holds through a session
// (docs/contract.md §14), over the raw protocol (internal/rawsession) and
// through its instance's front proxy, so that the faults can cut and delay
// its socket. It opens a session (window 200–500 ms), acquires its lease
// (waiting, one time in three), renews it a few times with a checkpoint
// while it leads, and then releases it, closes the session, or stops as a
// crashed agent would: killed (the socket drops, no close) or frozen (the
// socket stays open and silent: SIGSTOP). Its operations go to the history
// marked Session, and its terms as Led entries ending at its own deadline.
type sessionContender struct {
	id     int
	name   string
	holder string
	home   int
	rng    *rand.Rand
	run    *safetyRun
	n      int // checkpoints written
}

// frontURLs returns the instances' front proxies, starting from home.
func (c *sessionContender) frontURLs() []string {
	var out []string
	for i := range c.run.insts {
		out = append(out, c.run.insts[(c.home+i)%len(c.run.insts)].frontURL)
	}
	return out
}

func (c *sessionContender) loop(ctx context.Context) {
	for ctx.Err() == nil {
		c.session(ctx)
		pause(ctx, c.run.cfg.pollMin+time.Duration(c.rng.Int64N(int64(c.run.cfg.pollMax-c.run.cfg.pollMin))))
	}
}

// record adds a session operation to the history.
func (c *sessionContender) record(e history.Entry) {
	e.Client, e.Name, e.Holder, e.Session = c.id, c.name, c.holder, true
	c.run.stats.add("session " + string(e.Op) + " " + e.Outcome.String())
	c.run.rec.Add(e)
}

// session runs one session: open, acquire, hold, end.
func (c *sessionContender) session(ctx context.Context) {
	window := 200*time.Millisecond + time.Duration(c.rng.Int64N(int64(300*time.Millisecond)))
	var yield atomic.Bool
	a := &rawsession.Agent{URLs: c.frontURLs(), Window: window, OnPush: func(m rawsession.Message) {
		if m.Type == "yield" {
			yield.Store(true)
		}
	}, Trace: c.run.traces.writer(c.holder)}
	octx, cancel := context.WithTimeout(ctx, safetyRequestTimeout)
	_, err := a.Open(octx)
	cancel()
	if err != nil {
		reason := rawsession.Code(err)
		if reason == "" {
			reason = "no answer"
		}
		c.run.stats.add("session open failed: " + reason)
		return
	}
	// A candidate (docs/contract.md §8): it waits, with a priority, and
	// asks to preempt one time in three.
	wait := c.run.cfg.ttl + time.Duration(c.rng.Int64N(int64(2*c.run.cfg.ttl)))
	e := history.Entry{Op: history.Acquire, Outcome: history.Maybe, Call: time.Now(), Priority: c.rng.IntN(11), Preempt: c.rng.IntN(3) == 0}
	actx, cancel := context.WithTimeout(context.Background(), safetyRequestTimeout+wait)
	l, err := a.AcquireAs(actx, rawsession.Message{Name: c.name, Holder: c.holder, WaitMs: wait.Milliseconds(), Priority: e.Priority, Preempt: e.Preempt})
	cancel()
	e.Return = time.Now()
	switch code := rawsession.Code(err); {
	case err == nil:
		e.Outcome, e.Lease, e.TTL = history.OK, &l, l.TTL
	case code == "lease_held" || code == "lease_reserved" || code == "session_held":
		// A refusal changes nothing; its problem carries no lease to
		// record. session_held: its previous session's holding is still
		// live (that session dies a window after its agent went).
		c.run.stats.add("session acquire " + code)
		c.close(a)
		return
	case refusedOutright(err):
		c.run.unexpected("session acquire %s by %s: %v", c.name, c.holder, err)
		c.close(a)
		return
	}
	c.record(e) // OK, or Maybe: it may have made a holding nobody told us of
	if e.Outcome != history.OK {
		a.Kill() // the instance ends whatever it made when the session dies
		return
	}
	c.hold(ctx, a, l.FencingToken, e.Return, &yield)
}

// hold leads the holding token from start while the agent's deadline
// allows, then ends it one of five ways.
func (c *sessionContender) hold(ctx context.Context, a *rawsession.Agent, token int64, start time.Time, yield *atomic.Bool) {
	window := a.SessionWindow()
	term := func(until time.Time) {
		c.record(history.Entry{Op: history.Led, Token: token, Call: start, Return: until})
	}
	// ledUntil is until when the agent leads the holding: its deadline,
	// or, once it learnt that the holding was lost (a push, or a resume
	// that could not take it back), until when it led it then. The
	// deadline alone would count the acks of a socket resumed without the
	// holding: the harness recorded such terms too long, an overlap the
	// agent never had (its trace showed the loss).
	ledUntil := func() time.Time {
		d := a.Deadline()
		if until, lost := a.Dropped(c.name); lost && until.Before(d) {
			return until
		}
		return d
	}
	// left ends the term where the agent stops leading and leaves the
	// holding to the instance, which ends it unseen when the session dies
	// (the checks allow that of a session holder).
	left := func() { term(ledUntil()) }
	for range c.rng.IntN(5) {
		if !pause(ctx, window/2+time.Duration(c.rng.Int64N(int64(window)))) || yield.Load() {
			break
		}
		if until, lost := a.Dropped(c.name); lost {
			term(until)
			c.close(a)
			return
		}
		if !a.Leads() { // its deadline passed (a cut, a slow backend): it stops leading here
			left()
			a.Kill()
			return
		}
		c.n++
		cp := fmt.Appendf(nil, `{"token":%d,"n":%d,"by":%q}`, token, c.n, c.holder)
		e := history.Entry{Op: history.Renew, Token: token, Checkpoint: cp, Outcome: history.Maybe, Call: time.Now()}
		c.do(a, &e, rawsession.Message{Type: "renew", Name: c.name, Holder: c.holder, FencingToken: token, Checkpoint: cp})
		if e.Outcome == history.Lost {
			term(minTime(e.Return, ledUntil()))
			c.close(a)
			return
		}
		if e.Outcome == history.Maybe { // the socket went: leave it to the instance
			left()
			a.Kill()
			return
		}
	}
	if until, lost := a.Dropped(c.name); lost {
		term(until)
		c.close(a)
		return
	}
	switch k := c.rng.IntN(8); {
	case yield.Load() || k < 3: // release through the session, then close it
		e := history.Entry{Op: history.Release, Token: token, Outcome: history.Maybe, Call: time.Now()}
		term(minTime(e.Call, ledUntil()))
		c.do(a, &e, rawsession.Message{Type: "release", Name: c.name, Holder: c.holder, FencingToken: token})
		c.close(a)
	case k < 4: // close: the service releases every holding of the session
		term(minTime(time.Now(), ledUntil()))
		c.close(a)
	case k < 6: // killed: the socket drops without a close
		c.run.stats.add("session agent killed")
		left()
		a.Kill()
	default: // frozen (SIGSTOP): silent on an open socket, then gone
		c.run.stats.add("session agent frozen")
		a.Freeze()
		left()
		pause(ctx, 2*window)
		a.Kill()
	}
}

// close sends close (bounded) and stops the agent.
func (c *sessionContender) close(a *rawsession.Agent) {
	ctx, cancel := context.WithTimeout(context.Background(), safetyRequestTimeout)
	defer cancel()
	if err := a.Close(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) && rawsession.Code(err) == "" {
		c.run.stats.add("session close unanswered")
	}
	a.Kill()
}

// refusedOutright reports an error answer no rule allows a session
// request here (a 4xx other than those the caller handles); a 5xx, a
// session that ended under the request (lease_lost) or no answer at all
// leave the request unanswered (Maybe).
func refusedOutright(err error) bool {
	var e *rawsession.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Problem.Status < 500 && e.Problem.Code != "lease_lost"
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// startFront starts the front proxy of an instance: agents' sockets reach
// the instance through it, so that faults can cut and delay them.
func startFront(t *testing.T, srv *toxiproxy.ApiServer, in *safetyInstance) {
	t.Helper()
	in.front = toxiproxy.NewProxy(srv, fmt.Sprintf("front-%d", in.idx), "127.0.0.1:0", hostOf(t, in.url()))
	if err := in.front.Start(); err != nil {
		t.Fatalf("start front proxy %d: %v", in.idx, err)
	}
	// Read once, before any contender runs: a restart of the proxy writes
	// Listen again (the same address) while the contenders dial.
	in.frontURL = "http://" + in.front.Listen
	t.Cleanup(in.front.Stop)
}

// retargetFront points an instance's front proxy at its (restarted)
// process.
func retargetFront(t *testing.T, in *safetyInstance) {
	t.Helper()
	if in.front == nil {
		return
	}
	in.frontMu.Lock()
	defer in.frontMu.Unlock()
	in.front.Stop()
	in.front.Lock()
	in.front.Upstream = hostOf(t, in.url())
	in.front.Unlock()
	if err := in.front.Start(); err != nil {
		t.Fatalf("restart front proxy %d: %v", in.idx, err)
	}
}

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("instance URL %q: %v", u, err)
	}
	return p.Host
}

// sessionFault is a fault of the agents' sockets to one instance.
type sessionFault struct {
	name string
	do   func(in *safetyInstance) error
}

// sessionFaults are injected, in turn over the instances, beside the
// run's other faults (injectSessionFaults) when it has session contenders.
var sessionFaults = []sessionFault{
	{"session sockets delayed 150±100 ms each way for 3s", func(in *safetyInstance) error {
		for _, dir := range []string{"upstream", "downstream"} {
			spec := fmt.Sprintf(`{"name":"sdelay-%s","type":"latency","stream":%q,"attributes":{"latency":150,"jitter":100}}`, dir, dir)
			if _, err := in.front.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
				return err
			}
		}
		time.Sleep(3 * time.Second)
		return errors.Join(in.front.Toxics.RemoveToxic(context.Background(), "sdelay-upstream"),
			in.front.Toxics.RemoveToxic(context.Background(), "sdelay-downstream"))
	}},
	{"session sockets cut (front proxy stopped) for 2s", func(in *safetyInstance) error {
		in.front.Stop()
		time.Sleep(2 * time.Second)
		return in.front.Start()
	}},
	{"session sockets blackholed for 2s (bytes dropped)", func(in *safetyInstance) error {
		if _, err := in.front.Toxics.AddToxicJson(strings.NewReader(`{"name":"sblackhole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)); err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		return in.front.Toxics.RemoveToxic(context.Background(), "sblackhole")
	}},
}

// injectSessionFaults injects sessionFaults one after another, with 1 s
// between them, until the fault-free tail before end; it returns what it
// did and the first error.
func (r *safetyRun) injectSessionFaults(end time.Time) ([]string, error) {
	start := time.Now()
	var log []string
	for i := 0; ; i++ {
		time.Sleep(time.Second)
		if time.Until(end) < 3*time.Second+faultTail {
			return log, nil
		}
		f := sessionFaults[i%len(sessionFaults)]
		in := r.insts[(i+1)%len(r.insts)]
		at := time.Since(start)
		in.frontMu.Lock() // not while a restart retargets it
		err := f.do(in)
		in.frontMu.Unlock()
		if err != nil {
			return log, fmt.Errorf("%s (instance %d): %w", f.name, in.idx, err)
		}
		log = append(log, fmt.Sprintf("+%v %s (instance %d)", at.Round(100*time.Millisecond), f.name, in.idx))
	}
}

// do sends m (a renew or release of the holding e records) through a's
// session and records e with its outcome: OK, Lost on lease_lost, or Maybe
// (the socket went); any other refusal is unexpected.
func (c *sessionContender) do(a *rawsession.Agent, e *history.Entry, m rawsession.Message) {
	rctx, cancel := context.WithTimeout(context.Background(), safetyRequestTimeout)
	l, err := a.Do(rctx, m)
	cancel()
	e.Return = time.Now()
	switch code := rawsession.Code(err); {
	case err == nil:
		e.Outcome, e.Lease = history.OK, &l
	case code == "lease_lost":
		e.Outcome = history.Lost
	case refusedOutright(err):
		c.run.unexpected("session %s %s by %s: %v", m.Type, c.name, c.holder, err)
	}
	c.record(*e)
}

// traces keeps the last lines of each session agent's trace
// (rawsession.Agent.Trace), by holder, for the report of a violation.
type traces struct {
	mu    sync.Mutex
	lines map[string][]string
}

// traceLines is how many lines a holder's trace keeps.
const traceLines = 400

// writer returns the Trace function of holder's agents.
func (t *traces) writer(holder string) func(string) {
	return func(line string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.lines == nil {
			t.lines = map[string][]string{}
		}
		l := append(t.lines[holder], line)
		if len(l) > traceLines {
			l = l[len(l)-traceLines:]
		}
		t.lines[holder] = l
	}
}

// about returns the traces of the session holders msg names ("s00" …),
// each line within span of at.
func (t *traces) about(msg string, at time.Time, span time.Duration) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for holder, lines := range t.lines {
		if !strings.Contains(msg, strconv.Quote(holder)) {
			continue
		}
		fmt.Fprintf(&b, "trace of session agent %s:\n", holder)
		for _, l := range lines {
			ts, err := time.Parse("15:04:05.000000", strings.SplitN(l, " ", 2)[0])
			if err == nil && !at.IsZero() {
				when := time.Date(at.Year(), at.Month(), at.Day(), ts.Hour(), ts.Minute(), ts.Second(), ts.Nanosecond(), time.UTC)
				if d := when.Sub(at.UTC()); d < -span || d > span {
					continue
				}
			}
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}
