package emulatortests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// safetyPause is how long the pause fault stops an instance: longer than
// the silence after which an agent replaces its socket (rawsession: 4
// windows and at least SilentMin; the session contenders' windows are at
// most 500 ms) and the window of every session, plus time to resume
// elsewhere. The instance's session leases (safetySessionTTL) run out
// meanwhile.
const safetyPause = rawsession.SilentMin + 2*time.Second

// pauseFind bounds the wait of the pause fault for a session agent that
// holds its lease through the instance, and pauseAfter the wait, after
// SIGCONT, for the agents that were on it to have resumed elsewhere.
const (
	pauseFind  = 5 * time.Second
	pauseAfter = 5 * time.Second
)

// pauseCounts is what the pause faults of a run did to the session agents.
type pauseCounts struct {
	// pinned is how many agents held their lease through a paused
	// instance when it stopped; resumed how many of them resumed on
	// another instance before pauseAfter past SIGCONT.
	pinned, resumed int
	// holders are the agents that held through a paused instance, for the
	// report (their traces) when none resumed elsewhere.
	holders []string
	at      time.Time // when the last pause began
}

// pauseInstance stops the process of in with SIGSTOP for safetyPause and
// resumes it with SIGCONT, as a paused VM or a stalled process looks from
// outside: its sockets stay open and silent, its requests unanswered. The
// leasesvc binary runs as one process without children (e2e.StartService
// execs it directly), so signalling its pid stops all of it. Before the
// pause it waits (at most pauseFind) for a session agent that holds its
// lease through in, and keeps each such agent holding (sessionContender.stay)
// until it has resumed elsewhere (or pauseAfter past SIGCONT). After
// SIGCONT the instance finds its sessions silent for longer than their
// window and ends them at its epoch, a compare-and-set that must fail for
// every session that moved.
func pauseInstance(t *testing.T, r *safetyRun, in *safetyInstance, _ *pubsub.Client) {
	r.pauseMu.Lock() // no session fault on the other instances meanwhile: the agents resume there
	defer r.pauseMu.Unlock()
	var pinned []*sessionContender
	resumes := map[*sessionContender]int{}
	if in.frames != nil {
		faultPoll(r.ctx, pauseFind, func() bool {
			for _, c := range r.sessions {
				if ok, n := c.pin(in.frames.url); ok {
					pinned = append(pinned, c)
					resumes[c] = n
				}
			}
			return len(pinned) > 0
		})
	}
	defer func() {
		for _, c := range pinned {
			c.unpin()
		}
	}()
	in.mu.Lock()
	svc := in.svc
	in.mu.Unlock()
	at := time.Now()
	svc.Freeze(t)
	faultWait(r.ctx, safetyPause) // thawed however the wait ends
	if err := svc.Thaw(); err != nil {
		t.Fatalf("instance %d: %v", in.idx, err)
	}
	resumed := func() int {
		n := 0
		for _, c := range pinned {
			if k, to := c.lastResume(); k > resumes[c] && to != in.frames.url {
				n++
			}
		}
		return n
	}
	faultPoll(r.ctx, pauseAfter, func() bool { return resumed() >= len(pinned) })
	r.mu.Lock()
	r.paused.pinned += len(pinned)
	r.paused.resumed += resumed()
	r.paused.at = at
	for _, c := range pinned {
		r.paused.holders = append(r.paused.holders, c.holder)
	}
	r.mu.Unlock()
}

// startFrames starts the frame proxy of an instance, in front of its front
// proxy.
func startFrames(t *testing.T, r *safetyRun, in *safetyInstance) {
	t.Helper()
	front := hostOf(t, in.frontURL)
	p, err := startFrameProxy(func() string { return front }, &r.caps)
	if err != nil {
		t.Fatalf("start frame proxy %d: %v", in.idx, err)
	}
	in.frames = p
	t.Cleanup(p.stop)
}

// checkExercised fails the run when the faults aimed at sessions never did
// what they are for: a pause that found agents holding through the instance
// but none of them resumed elsewhere.
func (r *safetyRun) checkExercised(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paused.pinned > 0 && r.paused.resumed == 0 {
		t.Errorf("%d session agents held through a paused instance, and none resumed elsewhere", r.paused.pinned)
		var quoted []string
		for _, h := range r.paused.holders {
			quoted = append(quoted, strconv.Quote(h))
		}
		t.Logf("%s", r.traces.about(strings.Join(quoted, " "), r.paused.at.Add(safetyPause), safetyPause+pauseAfter))
	}
}
