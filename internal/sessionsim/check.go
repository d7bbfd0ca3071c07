package sessionsim

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Margin is the drift margin of docs/contract.md §2 and §14 (A3).
const Margin = 0.1

// Spec is an agent as rules A1–A3 of docs/contract.md §14 describe it,
// rebuilt from the frames that the agent sent and received, at the
// instants it sent and received them (the bubble's clock, the agent's):
//
//   - the current socket is the one on which it last sent open or resume;
//   - an ack counts when it arrives on the current socket (A2: a retired
//     socket's acks count for nothing, as its pushes), and the agent then
//     leads until the heartbeat's send time + window × (1 − Margin) (A3);
//   - it leads a holding from the answer to its acquire on the current
//     socket (an answer on a retired socket is not led, A2 step 6); it
//     stops leading it when a lost or revoked push on the current socket,
//     or the lost list of the resumed answer on it, names it, when it
//     sends a resume that does not claim it, or when it sends a release,
//     transfer or close; and it never leads again a holding it asked to
//     end (an acquire of the same lease sent before its release may be
//     answered after it, with the same token).
//
// That is rules A1–A3 and A6 (a release or transfer ends the lead when it
// is sent; this agent never takes it back, even after a refusal): A4
// (acks count for a lease only after its answer) and A5 (a loss pushed
// before the answer) are not part of it. With the service's rules S5 and
// S6 such an agent must be safe, so it is the stricter judge.
//
// The agent under test (internal/rawsession) may be more careful than
// this; never less (the checker compares its own deadline with this one).
type Spec struct {
	// Holder is the holder the agent acquires as.
	Holder   string
	window   time.Duration
	current  *Conn
	beats    map[*Conn]map[int64]time.Time
	acquires map[*Conn]map[int64]bool
	pending  map[*Conn]map[int64]*inflight // acquires not answered yet
	deadline time.Time
	basis    basis // the heartbeat that set the deadline
	held     map[string]Holding
	ended    map[Holding]bool // released, transferred or closed by the agent
	reported map[string]bool  // violations reported, by holding and begin
}

// inflight is an acquire sent and not yet answered, with the losses of
// its lease pushed on its socket meanwhile.
type inflight struct {
	name string
	sent time.Time
	lost map[int64]time.Time // fencing token → when its lost or revoked push arrived
}

// basis is the counted heartbeat that set a deadline.
type basis struct {
	id          int64
	sent, acked time.Time
	c           *Conn
}

// describe tells b for a violation.
func (b basis) describe(w *World) string {
	if b.c == nil {
		return "no heartbeat acked"
	}
	return fmt.Sprintf("heartbeat %d sent at %s on conn %d (instance %d), acked at %s",
		b.id, w.at(b.sent), b.c.ID, b.c.Inst.K, w.at(b.acked))
}

// lead is how long after a counted heartbeat's send time the agent leads.
func (sp *Spec) lead() time.Duration { return time.Duration(float64(sp.window) * (1 - Margin)) }

// leads reports whether the agent leads at t.
func (sp *Spec) leads(t time.Time) bool { return t.Before(sp.deadline) }

// begun is the latest holding of a lease and when the backend decided it.
type begun struct {
	Holding
	at time.Time
}

// Checker checks the invariant of the simulation: no holding of a lease
// (by another holder, or with a new fencing token) begins, at the
// backend's decision, while an agent leads another holding of it by A3.
// It checks at each holding that begins (does an agent lead the lease
// now?) and at each change of what an agent leads (did another holding
// begin since the one it leads?), both in the bubble's time, under one
// lock: so no interleaving escapes it. It also checks the order of a
// socket (S6): no lost or revoked push for a (name, fencingToken) arrives
// before the result that answers the acquire of that (name, token) on that
// socket.
type Checker struct {
	w          *World
	mu         sync.Mutex
	specs      []*Spec
	latest     map[string]begun
	violations []Violation
}

// Violation is a break of the invariant.
type Violation struct {
	// Kind says what broke, in words that do not depend on the run's
	// details (rapid compares failures by their message when it shrinks).
	Kind string
	// Detail tells the agent, the holdings, the times and the heartbeat.
	Detail string
}

// The kinds of Violation.
const (
	KindBegan     = "a holding began while an agent led another holding of the lease"
	KindAgent     = "an agent led past its deadline by A3"
	KindLostFirst = "a lost or revoked push came before the result of the acquire it is about"
)

// newChecker returns the checker of w.
func newChecker(w *World) *Checker { return &Checker{w: w, latest: map[string]begun{}} }

// addSpec starts following an agent that holds as holder.
func (k *Checker) addSpec(holder string, window time.Duration) *Spec {
	k.mu.Lock()
	defer k.mu.Unlock()
	sp := &Spec{Holder: holder, window: window, beats: map[*Conn]map[int64]time.Time{},
		acquires: map[*Conn]map[int64]bool{}, pending: map[*Conn]map[int64]*inflight{}, held: map[string]Holding{}, ended: map[Holding]bool{}, reported: map[string]bool{}}
	k.specs = append(k.specs, sp)
	return sp
}

// sent follows a message the agent wrote on c at now.
func (k *Checker) sent(c *Conn, m *Msg, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	sp := c.agent
	switch m.Type {
	case "open":
		sp.current = c
	case "resume":
		// The resume lists what the agent holds: it leads nothing else
		// from here on (and the answer says which of these it lost).
		sp.current = c
		claimed := map[Holding]bool{}
		for _, h := range m.Leases {
			claimed[h] = true
		}
		for n, h := range sp.held {
			if !claimed[h] {
				delete(sp.held, n)
			}
		}
	case "heartbeat":
		if c == sp.current {
			if sp.beats[c] == nil {
				sp.beats[c] = map[int64]time.Time{}
			}
			sp.beats[c][m.ID] = now
		}
	case "acquire":
		if sp.acquires[c] == nil {
			sp.acquires[c] = map[int64]bool{}
		}
		sp.acquires[c][m.ID] = true
		if sp.pending[c] == nil {
			sp.pending[c] = map[int64]*inflight{}
		}
		sp.pending[c][m.ID] = &inflight{name: m.Name, sent: now, lost: map[int64]time.Time{}}
	case "release", "transfer":
		sp.ended[Holding{Name: m.Name, Holder: m.Holder, FencingToken: m.FencingToken}] = true
		if h, ok := sp.held[m.Name]; ok && h.FencingToken == m.FencingToken {
			delete(sp.held, m.Name)
		}
	case "close":
		for _, h := range sp.held {
			sp.ended[h] = true
		}
		clear(sp.held)
	}
}

// received follows a message the agent read on c at now.
func (k *Checker) received(c *Conn, m *Msg, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	sp := c.agent
	switch m.Type {
	case "opened":
		sp.window = time.Duration(m.WindowMs) * time.Millisecond
	case "ack":
		s, ok := sp.beats[c][m.Re]
		if !ok || c != sp.current || !s.Add(sp.lead()).After(sp.deadline) {
			return
		}
		sp.deadline = s.Add(sp.lead())
		sp.basis = basis{id: m.Re, sent: s, acked: now, c: c}
		k.leadsNow(sp, now)
	case "result":
		k.answered(sp, c, m, now)
		if !sp.acquires[c][m.Re] || c != sp.current || m.Lease == nil || sp.ended[*m.Lease] {
			return
		}
		sp.held[m.Lease.Name] = *m.Lease
		k.leadsNow(sp, now)
	case "resumed":
		if c != sp.current {
			return
		}
		for _, l := range m.Lost {
			if h, ok := sp.held[l.Name]; ok && h.FencingToken == l.FencingToken {
				delete(sp.held, l.Name)
			}
		}
	case "error":
		delete(sp.pending[c], m.Re)
	case "lost", "revoked":
		if m.Re == 0 {
			for _, a := range sp.pending[c] {
				if a.name == m.Name {
					if _, ok := a.lost[m.FencingToken]; !ok {
						a.lost[m.FencingToken] = now
					}
				}
			}
		}
		if c != sp.current || m.Re != 0 {
			return
		}
		if h, ok := sp.held[m.Name]; ok && h.FencingToken == m.FencingToken {
			delete(sp.held, m.Name)
		}
	}
}

// answered checks the result m of an acquire on c, at now, against the
// losses pushed on c while it was in flight (KindLostFirst); k.mu held.
func (k *Checker) answered(sp *Spec, c *Conn, m *Msg, now time.Time) {
	a, ok := sp.pending[c][m.Re]
	if !ok {
		return
	}
	delete(sp.pending[c], m.Re)
	if m.Lease == nil {
		return
	}
	if at, lost := a.lost[m.Lease.FencingToken]; lost {
		k.add(Violation{Kind: KindLostFirst, Detail: fmt.Sprintf(
			"at %s agent %s gets on conn %d (instance %d) the result %s token %d of its acquire id %d sent at %s, but a loss of %s token %d arrived on that socket at %s",
			k.w.at(now), sp.Holder, c.ID, c.Inst.K, m.Lease.Name, m.Lease.FencingToken, m.Re, k.w.at(a.sent),
			m.Lease.Name, m.Lease.FencingToken, k.w.at(at))})
	}
}

// leadsNow checks, after what sp leads changed at now, that no other
// holding of a lease it leads began since its own; k.mu held.
func (k *Checker) leadsNow(sp *Spec, now time.Time) {
	if !sp.leads(now) {
		return
	}
	for _, h := range sortedHeld(sp) {
		if b, ok := k.latest[h.Name]; ok && b.Holding != h {
			k.violate(sp, h, b, now)
		}
	}
}

// begin checks a holding that the backend began at.
func (k *Checker) begin(h Holding, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := begun{Holding: h, at: at}
	k.latest[h.Name] = b
	for _, sp := range k.specs {
		if mine, ok := sp.held[h.Name]; ok && mine != h && sp.leads(at) {
			k.violate(sp, mine, b, at)
		}
	}
}

// violate records a violation, once for a holding and the begin that
// broke it; k.mu held.
func (k *Checker) violate(sp *Spec, mine Holding, b begun, now time.Time) {
	key := fmt.Sprint(mine, b)
	if sp.reported[key] {
		return
	}
	sp.reported[key] = true
	v := fmt.Sprintf("at %s agent %s leads %s token %d until %s (%s), but %s token %d began at %s",
		k.w.at(now), sp.Holder, mine.Name, mine.FencingToken, k.w.at(sp.deadline), sp.basis.describe(k.w),
		b.Holder, b.FencingToken, k.w.at(b.at))
	k.add(Violation{Kind: KindBegan, Detail: v})
}

// add records v, up to 8 of each kind; k.mu held.
func (k *Checker) add(v Violation) {
	k.w.logf("VIOLATION: %s: %s", v.Kind, v.Detail)
	n := 0
	for _, u := range k.violations {
		if u.Kind == v.Kind {
			n++
		}
	}
	if n < 8 {
		k.violations = append(k.violations, v)
	}
}

// Violations returns what was violated so far.
func (k *Checker) Violations() []Violation {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Violation(nil), k.violations...)
}

// deadline returns the deadline A3 gives sp.
func (k *Checker) deadline(sp *Spec) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return sp.deadline
}

// note records a violation found outside the checker's hooks.
func (k *Checker) note(v Violation) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.add(v)
}

func sortedHeld(sp *Spec) []Holding {
	out := make([]Holding, 0, len(sp.held))
	for _, h := range sp.held {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// String is a short form of m for the trace.
func (m *Msg) String() string { return describe(m) }

// describe is a short form of m for the trace.
func describe(m *Msg) string {
	var b strings.Builder
	b.WriteString(m.Type)
	if m.ID != 0 {
		fmt.Fprintf(&b, " id %d", m.ID)
	}
	if m.Re != 0 {
		fmt.Fprintf(&b, " re %d", m.Re)
	}
	if m.Name != "" {
		fmt.Fprintf(&b, " %s/%d", m.Name, m.FencingToken)
	}
	if m.Reason != "" {
		fmt.Fprintf(&b, " (%s)", m.Reason)
	}
	if m.Lease != nil {
		fmt.Fprintf(&b, " lease %s/%d", m.Lease.Name, m.Lease.FencingToken)
	}
	if m.Epoch != 0 {
		fmt.Fprintf(&b, " epoch %d", m.Epoch)
	}
	for _, l := range m.Leases {
		fmt.Fprintf(&b, " claims %s/%d", l.Name, l.FencingToken)
	}
	for _, l := range m.Lost {
		fmt.Fprintf(&b, " lost %s/%d", l.Name, l.FencingToken)
	}
	if m.Problem != nil {
		b.WriteString(" problem")
	}
	return b.String()
}
