package emulatortests

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/internal/history"
	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// The session faults that act on one socket of one session, through the
// frame proxies (safety_frames_test.go): frames held back and delivered
// after the agent gave up on their socket and resumed elsewhere, and
// resumes duplicated onto new sockets after a later one took the session.

// lateWindow is the window of the late-frames agent's session. The
// instance that loses the agent's socket ends the session a window after
// the last message it received; before that the agent must have waited
// out its held resume (rawsession gives a resume 10 s), waited its beat
// (window/4) and resumed elsewhere: 10 s + window/4 well below window.
const lateWindow = 20 * time.Second

// lateNeed is about how long lateFrames takes; lateWait bounds its wait
// for the agent to resume elsewhere.
const (
	lateNeed = 30 * time.Second
	lateWait = 20 * time.Second
)

// lateHolder is the holder of the late-frames agent; its trace goes by it.
const lateHolder = "late"

// lateFrames runs one agent of its own (a session of window lateWindow on
// its own lease, r.lateName) over the three instances I, J, K (in first):
//
//  1. it acquires the lease through I; the fault holds its socket to I at
//     I's frame proxy (a renew sent on it is held with the heartbeats) and
//     arms J's proxy to hold the next resume of the session;
//  2. it cuts the agent's side of the socket to I: the agent resumes on J
//     (epoch 2), whose frame is held; it gives that up after 10 s and
//     resumes on K (epoch 3);
//  3. once K answered resumed, the held frames are delivered: the renew to
//     I, which must not answer result (the session moved: S4), and the
//     epoch-2 resume to J, which must be refused (409 session_conflict:
//     S1), never resumed;
//  4. the resume that took the session at K is replayed on a new socket to
//     each instance: each must be refused;
//  5. the agent releases the lease through K and closes the session.
//
// Every operation and the agent's term go to the history. It holds
// r.mainMu: no instance is killed, paused or cut meanwhile, so each step
// finds the instances it needs.
func lateFrames(r *safetyRun, in *safetyInstance) error {
	r.mainMu.Lock()
	defer r.mainMu.Unlock()
	n := len(r.insts)
	ins := []*safetyInstance{in, r.insts[(in.idx+1)%n], r.insts[(in.idx+2)%n]}
	resumed := make(chan rawsession.Message, 16)
	a := &rawsession.Agent{URLs: []string{ins[0].frames.url, ins[1].frames.url, ins[2].frames.url}, Window: lateWindow,
		Trace: r.traces.writer(lateHolder), OnResume: func(_ string, m rawsession.Message) {
			select {
			case resumed <- m:
			default:
			}
		}}
	c := &sessionContender{id: r.cfg.contenders + r.cfg.leases + r.cfg.sessions, name: r.lateName, holder: lateHolder, run: r}
	ctx, cancel := context.WithTimeout(context.Background(), safetyRequestTimeout)
	opened, err := a.Open(ctx)
	cancel()
	if err != nil {
		r.stats.add("late frames: open failed")
		return nil
	}
	defer a.Kill()
	e := history.Entry{Op: history.Acquire, Outcome: history.Maybe, Call: time.Now()}
	ctx, cancel = context.WithTimeout(context.Background(), safetyRequestTimeout)
	l, err := a.Acquire(ctx, c.name, c.holder, 0)
	cancel()
	e.Return = time.Now()
	if err == nil {
		e.Outcome, e.Lease, e.TTL = history.OK, &l, l.TTL
	} else if refusedOutright(err) {
		r.unexpected("late frames: acquire %s: %v", c.name, err)
	}
	c.record(e)
	if e.Outcome != history.OK {
		return nil
	}
	token, start := l.FencingToken, e.Return
	// The agent leads from its first acknowledged heartbeat (window/4
	// after the open).
	faultPoll(r.ctx, lateWindow/4+safetyRequestTimeout, a.Leads)

	// 1. Hold the socket to I and the next resume on J.
	sid := opened.SessionID
	hj := ins[1].frames.holdNext(sid)
	hi := ins[0].frames.holdCurrent(sid)
	if hi == nil {
		c.close(a)
		return fmt.Errorf("late frames: no socket of the session through the frame proxy of instance %d", in.idx)
	}
	cp := fmt.Appendf(nil, `{"token":%d,"n":1,"by":%q}`, token, c.holder)
	renew := history.Entry{Op: history.Renew, Token: token, Checkpoint: cp, Outcome: history.Maybe, Call: time.Now()}
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		c.do(a, &renew, rawsession.Message{Type: "renew", Name: c.name, Holder: c.holder, FencingToken: token, Checkpoint: cp})
	}()
	faultPoll(r.ctx, 2*time.Second, func() bool { return hi.holds("renew") })

	// 2. Cut it: the agent resumes on J (held), then on K.
	hi.cut()
	<-renewed
	var took rawsession.Message
	held, engaged := int64(0), false
	timeout := time.After(lateWait)
wait:
	for {
		select {
		case m := <-resumed:
			if held, engaged = hj.heldEpoch(); engaged && m.Epoch > held {
				took = m
				break wait
			}
		case <-timeout:
			break wait
		}
	}

	// 3. Deliver the held frames.
	moved := took.Epoch > 0
	answers, _ := hi.deliver(5 * time.Second)
	if id := hi.idOf("renew"); moved && id != 0 {
		for _, m := range answers {
			if m.Re == id && m.Type == "result" {
				r.unexpected("late frames: a renew held on a socket the agent gave up, delivered to instance %d after the session moved to epoch %d, answered result: %+v",
					ins[0].idx, took.Epoch, m)
			}
		}
	}
	answers, _ = hj.deliver(5 * time.Second)
	r.judgeResume("late resume", fmt.Sprintf("a resume at epoch %d held at instance %d until the agent resumed at epoch %d, then delivered", held, ins[1].idx, took.Epoch),
		answers, hj.idOf("resume"), moved)

	// 4. Replay the resume that took the session.
	if caps := r.caps.resumed(sid); moved && len(caps) > 0 {
		for _, target := range r.insts {
			m, err := replayResume(strings.TrimPrefix(target.frontURL, "http://"), caps[0], safetyRequestTimeout)
			var ms []rawsession.Message
			if err == nil {
				ms = append(ms, m)
			}
			r.judgeResume("replayed resume", fmt.Sprintf("the resume at epoch %d, replayed on a new socket to instance %d", caps[0].epoch, target.idx), ms, caps[0].id, true)
		}
	}

	// 5. Release and close.
	rel := history.Entry{Op: history.Release, Token: token, Outcome: history.Maybe, Call: time.Now()}
	c.record(history.Entry{Op: history.Led, Token: token, Call: start, Return: minTime(rel.Call, c.ledUntil(a))})
	c.do(a, &rel, rawsession.Message{Type: "release", Name: c.name, Holder: c.holder, FencingToken: token})
	c.close(a)
	return nil
}

// replayResumes replays the latest resumes the frame proxies carried that
// took their session (up to 3) on new sockets to in: each is a duplicate of
// a resume whose epoch the session already has, and must be refused.
func replayResumes(r *safetyRun, in *safetyInstance) error {
	for i, cp := range r.caps.resumed("") {
		if i == 3 {
			break
		}
		m, err := replayResume(strings.TrimPrefix(in.frontURL, "http://"), cp, safetyRequestTimeout)
		var ms []rawsession.Message
		if err == nil {
			ms = append(ms, m)
		}
		r.judgeResume("replayed resume", fmt.Sprintf("a resume at epoch %d, replayed on a new socket to instance %d", cp.epoch, in.idx), ms, cp.id, true)
	}
	return nil
}

// judgeResume judges the answer to a resume delivered late or replayed
// (id: its message id). When must, a resume at a higher epoch of the
// session had already been answered resumed, so this one is not higher
// than the session's epoch: it must be refused (409 session_conflict, or
// 404 session_not_found once the session ended; docs/contract.md §14, S1),
// and one that took the session is an error of the run.
func (r *safetyRun) judgeResume(kind, what string, answers []rawsession.Message, id int64, must bool) {
	for _, m := range answers {
		if m.Re != id && (m.Re != 0 || m.Type != "error") {
			continue
		}
		switch {
		case m.Type == "resumed" && must:
			r.unexpected("%s took the session: %s was answered resumed at epoch %d; a resume not above the session's epoch must be 409 session_conflict (docs/contract.md §14, S1)",
				kind, what, m.Epoch)
			r.mu.Lock()
			r.tookOne++
			r.mu.Unlock()
		case m.Type == "resumed":
			r.stats.add(kind + " resumed (no later resume had been answered)")
		case m.Type == "error" && m.Problem != nil:
			r.stats.add(kind + " refused: " + m.Problem.Code)
			switch m.Problem.Code {
			case "session_conflict", "session_not_found", "invalid_argument":
				r.mu.Lock()
				r.refused++
				r.mu.Unlock()
			}
		default:
			r.stats.add(kind + " answered " + m.Type)
		}
		return
	}
	r.stats.add(kind + ": no answer")
}

// heldEpoch returns the epoch of the held socket (its resume's proposal),
// once a socket is held.
func (h *hold) heldEpoch() (int64, bool) {
	select {
	case <-h.engaged:
	default:
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch, true
}

// idOf returns the id of the first held message of type typ, or 0.
func (h *hold) idOf(typ string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if m.Type == typ {
			return m.ID
		}
	}
	return 0
}
