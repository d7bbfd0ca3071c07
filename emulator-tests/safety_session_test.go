package emulatortests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/internal/history"
	"github.com/leasesvc/leasesvc/internal/rawsession"
	"github.com/leasesvc/leasesvc/lease"
)

// safetySessionTTL is the instances' LEASESVC_SESSION_LEASE_TTL in the
// safety runs: short, so that the leases of a session whose instance was
// killed, and whose agent is gone too, free within the run, so that the
// instances renew session leases (unseen by the history) three times a
// second, and so that the late-answer fault (safety_lateanswers_test.go)
// delivers many answers past it (a session's leases have
// max(it, 3 × window): 1–1.5 s for windows of 200–500 ms).
const safetySessionTTL = time.Second

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

	// What the faults that aim at the agents on one instance read
	// (safety_pause_test.go).
	mu      sync.Mutex
	front   string // the frame proxy its current socket goes through
	resumes int    // resumes answered resumed
	last    string // the frame proxy of the last of them
	holding bool   // it renews its holding (hold, before it ends it)
	// stay keeps it holding, renewing, rather than end its holding in one
	// of its ways: a pause of its instance is under way.
	stay bool
	// acks watches the current agent's trace (nil for an agent without).
	acks *ackWatch
}

// frontURLs returns the instances' frame proxies, starting from home.
func (c *sessionContender) frontURLs() []string {
	var out []string
	for i := range c.run.insts {
		out = append(out, c.run.insts[(c.home+i)%len(c.run.insts)].frames.url)
	}
	return out
}

// pin keeps the contender holding (stay) if it renews its holding through
// a socket that goes through front; it returns whether it did, and how many
// resumes the contender has had.
func (c *sessionContender) pin(front string) (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding || c.front != front {
		return false, 0
	}
	c.stay = true
	return true, c.resumes
}

// unpin lets the contender end its holding again.
func (c *sessionContender) unpin() {
	c.mu.Lock()
	c.stay = false
	c.mu.Unlock()
}

// leave reports whether the contender may end its holding now (it is not
// pinned), and then no longer counts as renewing it.
func (c *sessionContender) leave() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stay {
		return false
	}
	c.holding = false
	return true
}

// lastResume returns how many resumes it has had and the frame proxy of
// the last.
func (c *sessionContender) lastResume() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resumes, c.last
}

func (c *sessionContender) setHolding(v bool) {
	c.mu.Lock()
	c.holding = v
	c.mu.Unlock()
}

// rideOutMax bounds how long a contender waits for its agent to lead
// again after its socket went silent or dropped: the silence that makes
// the agent replace its socket (docs/contract.md §14, A3), and two resumes
// that may each wait 10 s for an answer.
const rideOutMax = rawsession.SilentMin + 20*time.Second

// rideOut waits, after a request on the agent's socket went unanswered or
// its deadline passed, until the agent leads again. Once its deadline has
// passed its terms are over (docs/contract.md §14, A3) and only a resume
// restarts them: a later ack on the same socket does not (an SDK's Elector
// campaigns again then). ok: it leads again. Otherwise lapsed tells whether
// its deadline passed, and until is that deadline: it did not lead within
// rideOutMax, the holding was lost, the session ended, ctx did, or it
// lapsed and then heard acks again without a resume.
//
// Such an ack restarts no term, but it is still the instance's word that
// every lease of the session is safe for a window past its heartbeat
// (docs/contract.md §14, S2), unless a loss of the lease came before it on
// the socket: rideOut hands that span to vouched, which records it as a
// term, so that the checks fail the run if another holding overlaps it.
func (c *sessionContender) rideOut(ctx context.Context, a *rawsession.Agent, vouched func(from, until time.Time)) (ok, lapsed bool, until time.Time) {
	c.run.stats.add("session agent waits to lead again")
	before, _ := c.lastResume()
	for end := time.Now().Add(rideOutMax); time.Now().Before(end); {
		if _, lost := a.Dropped(c.name); lost || a.Ended() {
			return false, lapsed, until
		}
		d := a.Deadline()
		leads := !d.IsZero() && time.Now().Before(d)
		resumed, _ := c.lastResume()
		switch {
		case leads && (!lapsed || resumed > before):
			c.run.stats.add("session agent leads again")
			return true, false, time.Time{}
		case leads:
			c.run.stats.add("session agent lapsed, then acked again on its socket: its term ended at the lapse")
			// Read again after the deadline: a loss queued before the ack
			// that set d was read before it.
			if _, lost := a.Dropped(c.name); !lost {
				vouched(d.Add(-a.SessionWindow()*9/10), d)
			}
			return false, true, until
		case !lapsed:
			lapsed, until = true, d
			before, _ = c.lastResume()
		}
		if !pause(ctx, 20*time.Millisecond) {
			break
		}
	}
	return false, lapsed, until
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
	}, OnResume: func(url string, _ rawsession.Message) {
		c.mu.Lock()
		c.front, c.last, c.resumes = url, url, c.resumes+1
		c.mu.Unlock()
	}}
	acks, trace := &ackWatch{}, c.run.traces.writer(c.holder)
	a.Trace = func(line string) {
		acks.note(line)
		trace(line)
	}
	c.mu.Lock()
	c.front, c.acks = a.URLs[0], acks
	c.mu.Unlock()
	octx, cancel := context.WithTimeout(ctx, safetyRequestTimeout)
	_, err := a.Open(octx)
	cancel()
	acks.setWindow(a.SessionWindow())
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
		if !e.Return.Before(l.ExpireTime) { // the late-answer fault's mark (S5 forbids it, socket faults aside)
			c.run.stats.add("session acquire answered ok after its holding's expireTime")
		}
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
	case errors.Is(err, lease.ErrLost): // its lost came first (A5): unanswered for the history
		c.run.stats.add("session acquire answered after its lost: not led")
	}
	c.record(e) // OK, or Maybe: it may have made a holding nobody told us of
	if e.Outcome != history.OK {
		a.Kill() // the instance ends whatever it made when the session dies
		return
	}
	acks.arm(e.Return)
	c.hold(ctx, a, l.FencingToken, e.Return, &yield)
}

// hold leads the holding token from start while the agent's deadline
// allows, then ends it one of five ways. When its deadline passes or a
// renewal goes unanswered, it waits for the agent to lead again through a
// resume (rideOut) before it gives up and leaves the holding to the
// instance.
func (c *sessionContender) hold(ctx context.Context, a *rawsession.Agent, token int64, start time.Time, yield *atomic.Bool) {
	c.setHolding(true)
	defer c.setHolding(false)
	window := a.SessionWindow()
	term := func(until time.Time) {
		c.record(history.Entry{Op: history.Led, Token: token, Call: start, Return: until})
	}
	vouched := func(from, until time.Time) {
		c.run.stats.add("session agent acked after its lapse, held by the ack's S2 vouch")
		c.record(history.Entry{Op: history.Led, Token: token, Call: from, Return: until})
	}
	ledUntil := func() time.Time { return c.ledUntil(a) }
	// left ends the term where the agent stopped leading: its deadline,
	// or where it learnt the holding was lost if that came first (not
	// that moment alone: an agent that lost its holding before its first
	// acknowledged heartbeat never led it). The instance ends the holding
	// unseen when the session dies (the checks allow that of a session
	// holder).
	left := func() { term(ledUntil()) }
	// gone ends the hold when the agent did not lead again (rideOut); a
	// term that lapsed ended at its deadline then.
	gone := func(lapsed bool, until time.Time) {
		end := ledUntil()
		if lapsed && until.Before(end) {
			end = until
		}
		term(end)
		if _, lost := a.Dropped(c.name); lost {
			c.close(a)
			return
		}
		a.Kill()
	}
	for i, n := 0, c.rng.IntN(5); ; i++ {
		if !pause(ctx, window/2+time.Duration(c.rng.Int64N(int64(window)))) {
			break
		}
		// After n renewals, or asked to yield, it ends the holding; not
		// while pinned: its release would go unanswered and end the agent.
		if (i >= n || yield.Load()) && c.leave() {
			break
		}
		if _, lost := a.Dropped(c.name); lost {
			left()
			c.close(a)
			return
		}
		if !a.Leads() { // its deadline passed (a cut, a pause, a slow backend)
			if ok, lapsed, until := c.rideOut(ctx, a, vouched); !ok {
				gone(lapsed, until)
				return
			}
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
		if e.Outcome == history.Maybe { // the socket went or hangs
			if ok, lapsed, until := c.rideOut(ctx, a, vouched); !ok {
				gone(lapsed, until)
				return
			}
		}
	}
	if _, lost := a.Dropped(c.name); lost {
		left()
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

// ledUntil is until when the agent leads the holding: its deadline (no
// later than its acquire's cap while no ack has vouched for the holding
// since its answer: rawsession.Agent.LeaseDeadline, A4), or, once it learnt that the holding was lost (a push, or a resume that could
// not take it back), until when it led it then (never, when it lost it
// before any acknowledged heartbeat: ackWatch). The deadline alone would
// count the acks of a socket resumed without the holding: the harness
// recorded such terms too long, an overlap the agent never had (its trace
// showed the loss).
func (c *sessionContender) ledUntil(a *rawsession.Agent) time.Time {
	d := a.Deadline()
	if held := a.LeaseDeadline(c.name); !held.IsZero() && held.Before(d) {
		d = held // no ack has vouched for it since its answer yet (A4)
	}
	until, lost := a.Dropped(c.name)
	c.mu.Lock()
	acks := c.acks
	c.mu.Unlock()
	if lapse, ok := acks.lapsed(); ok && lapse.Before(d) {
		d = lapse
	}
	switch {
	case lost && !acks.led(c.name):
		return time.Time{} // never led: an empty term
	case lost && until.Before(d):
		return until
	}
	return d
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

// traceLines is how many lines a holder's trace keeps: an ack moves the
// deadline every window/4, so this is minutes of trace.
const traceLines = 20000

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
