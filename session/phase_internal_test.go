package session

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"
)

// same in a row's kind means the kind does not change.
const same endKind = 255

// guard is the guard of an event: whether every lease is safe (heartbeat)
// or no message came for a window (death timer, shutdown).
type guard uint8

const (
	noGuard guard = iota
	yes
	no
)

// row is one line of the session's transition table: in any of the
// phases from (and, ending, any of kinds; nil: all), event ev with guard g
// leads to phase to, kind nk, with effects do.
type row struct {
	from  []phase
	kinds []endKind
	ev    eventKind
	g     guard
	to    phase
	nk    endKind
	do    effect
}

var (
	anyPhase = []phase{phaseOpening, phaseLive, phaseEnding, phaseGone}
	notLive  = []phase{phaseOpening, phaseEnding, phaseGone}
	over     = []phase{phaseEnding, phaseGone}
	expiries = []endKind{endExpired, endMoved, endShutdown, endLapsed}
	keep     = phase(255) // to: the phase does not change
)

// table is docs/contract.md §14, Session states, row by row.
var table = []row{
	// Whatever the phase.
	{from: anyPhase, ev: evAttached, to: keep, nk: same, do: effUseConn},
	{from: anyPhase, ev: evSocketDropped, to: keep, nk: same, do: effForgetConn},
	{from: anyPhase, ev: evMessage, to: keep, nk: same, do: effTouch},
	{from: []phase{phaseLive}, ev: evHeartbeat, g: yes, to: keep, nk: same, do: effTouch | effCountHeartbeat | effAck},
	{from: []phase{phaseLive}, ev: evHeartbeat, g: no, to: keep, nk: same, do: effTouch | effCountHeartbeat},
	{from: notLive, ev: evHeartbeat, g: yes, to: keep, nk: same, do: effTouch | effCountHeartbeat},
	{from: notLive, ev: evHeartbeat, g: no, to: keep, nk: same, do: effTouch | effCountHeartbeat},

	// Opening.
	{from: []phase{phaseOpening}, ev: evRegistered, to: phaseLive, nk: same, do: effUseConn | effTouch | effAnswer | effArm | effTrack | effStart},
	{from: []phase{phaseOpening}, ev: evRefused, to: phaseGone, nk: same, do: effGiveBack},
	{from: []phase{phaseOpening}, ev: evLeaseLost, to: keep, nk: same, do: effDrop},

	// Live.
	{from: []phase{phaseLive}, ev: evMoveAsked, to: keep, nk: same, do: effPush},
	{from: []phase{phaseLive}, ev: evDeathTimer, g: no, to: keep, nk: same, do: effRearm},
	{from: []phase{phaseLive}, ev: evDeathTimer, g: yes, to: phaseEnding, nk: endExpired, do: effStop | effLeave | effReadRecord | effExpire},
	{from: []phase{phaseLive}, ev: evShutdown, g: no, to: keep, nk: same, do: effRearm},
	{from: []phase{phaseLive}, ev: evShutdown, g: yes, to: phaseEnding, nk: endShutdown, do: effStop | effLeave | effReadRecord | effExpire},
	{from: []phase{phaseLive}, ev: evClose, to: phaseEnding, nk: endClosed, do: effStop | effLeave | effRelease},
	{from: []phase{phaseLive}, ev: evMovedOn, to: phaseEnding, nk: endMoved, do: effStop | effLeave},
	{from: []phase{phaseLive}, ev: evRecordLapsed, to: phaseEnding, nk: endLapsed, do: effStop | effLeave | effPushEnded | effWait | effReadRecord | effExpire},
	{from: []phase{phaseLive}, ev: evLeaseLost, to: keep, nk: same, do: effDrop | effPush | effUntrack},
	{from: []phase{phaseLive}, ev: evLeaseLetGo, to: keep, nk: same, do: effDrop | effUntrack},
	{from: []phase{phaseLive}, ev: evLeaseAnswered, to: keep, nk: same, do: effJoin | effAnswer | effTrack},

	// Ending.
	{from: []phase{phaseEnding}, kinds: expiries, ev: evFoundMoved, to: keep, nk: endMoved},
	{from: []phase{phaseEnding}, kinds: []endKind{endClosed}, ev: evFoundMoved, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseEnding}, kinds: expiries, ev: evEndWritten, to: phaseGone, nk: same, do: effAudit | effObserveEnd | effPushEnded | effDone},
	{from: []phase{phaseEnding}, kinds: []endKind{endClosed}, ev: evEndWritten, to: phaseGone, nk: same, do: effAudit | effObserveEnd | effDone},
	{from: []phase{phaseEnding}, ev: evEndAbandoned, to: phaseGone, nk: same, do: effObserveEnd | effDone},

	// Not live: lease operations are refused, an answered holding is
	// ended (S5), and the end decides what becomes of the leases.
	{from: notLive, ev: evLeaseAnswered, to: keep, nk: same, do: effExpireUnanswered | effRefuse},
	{from: over, ev: evLeaseLost, to: keep, nk: same},
	{from: notLive, ev: evLeaseLetGo, to: keep, nk: same},
	{from: notLive, ev: evMoveAsked, to: keep, nk: same},

	// What a phase does not take: refused, nothing changes.
	{from: []phase{phaseOpening}, ev: evDeathTimer, g: yes, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseOpening}, ev: evDeathTimer, g: no, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseOpening}, ev: evShutdown, g: yes, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseOpening}, ev: evShutdown, g: no, to: keep, nk: same, do: effRefuse},
	{from: over, ev: evDeathTimer, g: yes, to: keep, nk: same, do: effRefuse},
	{from: over, ev: evDeathTimer, g: no, to: keep, nk: same, do: effRefuse},
	{from: over, ev: evShutdown, g: yes, to: keep, nk: same, do: effRefuse},
	{from: over, ev: evShutdown, g: no, to: keep, nk: same, do: effRefuse},
	{from: notLive, ev: evClose, to: keep, nk: same, do: effRefuse},
	{from: notLive, ev: evMovedOn, to: keep, nk: same, do: effRefuse},
	{from: notLive, ev: evRecordLapsed, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseLive, phaseEnding, phaseGone}, ev: evRegistered, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseLive, phaseEnding, phaseGone}, ev: evRefused, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseOpening, phaseLive, phaseGone}, ev: evFoundMoved, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseOpening, phaseLive, phaseGone}, ev: evEndWritten, to: keep, nk: same, do: effRefuse},
	{from: []phase{phaseOpening, phaseLive, phaseGone}, ev: evEndAbandoned, to: keep, nk: same, do: effRefuse},
}

// effNames names the effects of do, for the failures.
func effNames(do effect) string {
	names := []string{"touch", "useConn", "forgetConn", "ack", "answer", "push", "join", "drop", "rearm", "arm",
		"stop", "track", "untrack", "start", "giveBack", "countHeartbeat", "expireUnanswered", "refuse",
		"leave", "pushEnded", "wait", "readRecord", "release", "expire", "audit", "observeEnd", "done"}
	var got []string
	for do != 0 {
		i := bits.TrailingZeros32(uint32(do))
		got = append(got, names[i])
		do &^= 1 << i
	}
	return "{" + strings.Join(got, " ") + "}"
}

// guards are the guard values an event is decided with.
func guards(ev eventKind) []guard {
	switch ev {
	case evHeartbeat, evDeathTimer, evShutdown:
		return []guard{yes, no}
	}
	return []guard{noGuard}
}

func (r row) matches(p phase, k endKind, ev eventKind, g guard) bool {
	if r.ev != ev || r.g != g {
		return false
	}
	in := false
	for _, f := range r.from {
		in = in || f == p
	}
	if !in {
		return false
	}
	if r.kinds == nil || p != phaseEnding {
		return true
	}
	for _, rk := range r.kinds {
		if rk == k {
			return true
		}
	}
	return false
}

// TestTransitionTable: every (phase, kind, event, guard) has exactly one
// row of the table, and transition does what that row says.
func TestTransitionTable(t *testing.T) {
	for p := phaseOpening; p <= phaseGone; p++ {
		kinds := []endKind{endClosed}
		if p == phaseEnding {
			kinds = []endKind{endClosed, endExpired, endMoved, endShutdown, endLapsed}
		}
		for _, k := range kinds {
			for ev := eventKind(0); ev < numEvents; ev++ {
				for _, g := range guards(ev) {
					name := fmt.Sprintf("%v/%v/%v/%d", p, k, ev, g)
					var rows []row
					for _, r := range table {
						if r.matches(p, k, ev, g) {
							rows = append(rows, r)
						}
					}
					if len(rows) != 1 {
						t.Errorf("%s: %d rows of the table; want exactly one", name, len(rows))
						continue
					}
					want := rows[0]
					wantP, wantK := want.to, want.nk
					if wantP == keep {
						wantP = p
					}
					if wantK == same {
						wantK = k
					}
					gotP, gotK, gotDo := transition(p, k, event{kind: ev, safe: g == yes, silent: g == yes})
					if gotP != wantP || gotK != wantK || gotDo != want.do {
						t.Errorf("%s: transition = (%v, %v, %s); want (%v, %v, %s)", name, gotP, gotK, effNames(gotDo), wantP, wantK, effNames(want.do))
					}
				}
			}
		}
	}
}

// TestOnlyLiveAcks: the one transition that acks is a heartbeat of a live
// session with every lease safe (S2), and every transition into ending
// stops the acks and leaves the registry at once.
func TestOnlyLiveAcks(t *testing.T) {
	for p := phaseOpening; p <= phaseGone; p++ {
		for ev := eventKind(0); ev < numEvents; ev++ {
			for _, g := range guards(ev) {
				next, _, do := transition(p, endExpired, event{kind: ev, safe: g == yes, silent: g == yes})
				if do.has(effAck) && (p != phaseLive || ev != evHeartbeat || g != yes) {
					t.Errorf("%v/%v/%d acks", p, ev, g)
				}
				if next == phaseEnding && p != phaseEnding && !do.has(effStop|effLeave) {
					t.Errorf("%v/%v/%d begins an end without stopping the acks and leaving the registry", p, ev, g)
				}
				if p == phaseGone && next != phaseGone {
					t.Errorf("%v/%v/%d leaves gone for %v", p, ev, g, next)
				}
			}
		}
	}
}

// recConn records what is queued on it.
type recConn struct{ got []Push }

func (c *recConn) Push(p Push) { c.got = append(c.got, p) }

// TestLeaseLeavesOnce: a holding leaves the table with its push queued
// under the lock and its untrack left for after; a holding that is no
// longer the table's (a later one replaced it) changes nothing, and says
// nothing.
func TestLeaseLeavesOnce(t *testing.T) {
	r := registry(t, leaseManager(t))
	s, _, err := r.Open(t.Context(), "c", "", time.Minute, nopConn{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	c := &recConn{}
	s.Attach(c)
	s.mu.Lock()
	h, stale := &held{name: "a", token: 2, sent: s.clock.Now()}, &held{name: "a", token: 1}
	joined := s.step(event{kind: evLeaseAnswered, h: h})
	gone := s.step(event{kind: evLeaseLost, h: stale, push: &Push{Type: PushLost, Name: "a", FencingToken: 1}})
	inTable := s.leases["a"] == h
	lost := s.step(event{kind: evLeaseLost, h: h, push: &Push{Type: PushLost, Name: "a", FencingToken: 2}})
	s.mu.Unlock()
	if len(joined.track) != 1 || !inTable {
		t.Fatalf("answered: track %v, in the table %v; want it tracked and in the table", joined.track, inTable)
	}
	if gone.do.has(effPush) || gone.untrack != nil {
		t.Fatalf("a stale holding's loss: %+v; want nothing pushed or untracked", gone)
	}
	if s.Leases() != 0 || len(lost.untrack) != 1 || len(c.got) != 1 || c.got[0].FencingToken != 2 {
		t.Fatalf("the loss: %d leases, untrack %v, queued %+v; want the table empty, a untracked, one lost for token 2", s.Leases(), lost.untrack, c.got)
	}
}
