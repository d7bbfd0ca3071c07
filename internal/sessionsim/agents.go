package sessionsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// Acquire has agent a acquire name through its session, waiting up to
// wait, in the background; false when a has not opened its session.
func (w *World) Acquire(a *Agent, name string, wait time.Duration) bool {
	if !w.Opened(a) {
		return false
	}
	w.logf("agent %s: acquire %s waiting %v", a.Spec.Holder, name, wait)
	w.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, wait+20*time.Second)
		defer cancel()
		g := newSpinGuard(ctx)
		defer g.cancel(nil)
		l, err := a.Acquire(g, name, a.Spec.Holder, wait)
		if err != nil {
			w.logf("agent %s: acquire %s: %v", a.Spec.Holder, name, err)
			return
		}
		w.logf("agent %s: acquired %s token %d", a.Spec.Holder, name, l.FencingToken)
	})
	return true
}

// spinGuard is a context that cancels itself when it is asked for Done
// spinLimit times at one instant of the bubble: rawsession.Agent.usable
// spins on a retired socket that has closed until the resume under way
// ends (its select finds the socket's Done ready at once), and a goroutine
// that spins keeps the bubble's time from advancing, so the resume never
// ends. The guard ends the acquire instead (it has sent nothing yet).
type spinGuard struct {
	context.Context
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	at     time.Time
	n      int
}

// spinLimit is how many calls of Done at one instant make a spin.
const spinLimit = 100

// errSpin is the cause of a spinGuard's cancellation.
var errSpin = errors.New("sessionsim: the agent spun waiting for its resume (rawsession.Agent.usable)")

func newSpinGuard(ctx context.Context) *spinGuard {
	g := &spinGuard{}
	g.Context, g.cancel = context.WithCancelCause(ctx)
	return g
}

// Done counts the calls at the current instant.
func (g *spinGuard) Done() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); now.Equal(g.at) {
		g.n++
		if g.n == spinLimit {
			g.cancel(errSpin)
		}
	} else {
		g.at, g.n = now, 0
	}
	return g.Context.Done()
}

// HeldBy returns the holdings agent a keeps, by name.
func (w *World) HeldBy(a *Agent) []rawsession.Held {
	if !w.Opened(a) {
		return nil
	}
	hs := a.Held()
	slices.SortFunc(hs, func(x, y rawsession.Held) int { return strings.Compare(x.Name, y.Name) })
	return hs
}

// End has agent a release h, or transfer it to to when to is not empty,
// in the background.
func (w *World) End(a *Agent, h rawsession.Held, to string) {
	m := rawsession.Message{Type: "release", Name: h.Name, Holder: h.Holder, FencingToken: h.FencingToken}
	if to != "" {
		m.Type, m.To = "transfer", to
	}
	w.logf("agent %s: %s %s token %d %s", a.Spec.Holder, m.Type, h.Name, h.FencingToken, to)
	w.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := a.Do(ctx, m); err != nil {
			w.logf("agent %s: %s %s: %v", a.Spec.Holder, m.Type, h.Name, err)
		}
	})
}

// Opened reports whether agent a has opened its session.
func (w *World) Opened(a *Agent) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return a.opened
}

// CheckAgents compares each agent's own deadlines, the session's and each
// holding's (A4 may end a holding's sooner), with the one A3 gives it: the
// agent under test may stop sooner, never later.
func (w *World) CheckAgents() {
	w.mu.Lock()
	agents := slices.Clone(w.agents)
	w.mu.Unlock()
	for _, a := range agents {
		if !w.Opened(a) {
			continue
		}
		own, spec := a.Deadline(), w.check.deadline(a.Spec)
		if own.After(spec) {
			w.check.note(Violation{Kind: KindAgent, Detail: "agent " + a.Spec.Holder + " leads until " + w.at(own) + ", past its deadline by A3, " + w.at(spec)})
		}
		for _, h := range a.Held() {
			if d := leaseDeadline(a, h.Name); d.After(spec) {
				w.check.note(Violation{Kind: KindAgent, Detail: fmt.Sprintf("agent %s leads %s token %d until %s, past its deadline by A3, %s",
					a.Spec.Holder, h.Name, h.FencingToken, w.at(d), w.at(spec))})
			}
		}
	}
}

// Violations returns the violations found so far.
func (w *World) Violations() []Violation { return w.check.Violations() }
