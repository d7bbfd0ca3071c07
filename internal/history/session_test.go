package history

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasesvc/leasesvc/lease"
)

// sessionHistory is a holding of "s" through a session: acquired at 0 for
// the session lease TTL (30 s), renewed by the agent at 300 with a
// checkpoint-less renew, renewed unseen by its instance at 450 (a get
// shows it), led by the agent until ledUntil by its own deadline, killed
// (an unanswered release stands for the instance's release on the
// session's death), ended by the instance at 1400, then acquired by "b" at
// 1500. session false records the same answers as plain operations.
func sessionHistory(ledUntil int, session bool) []Entry {
	es := seq(
		Entry{Client: 1, Op: Acquire, Holder: "s", TTL: 30 * time.Second, Outcome: OK, Lease: mk("s", 1, 30000, 0, 0, 30000, 0), Session: session},
		Entry{Client: 1, Op: Renew, Holder: "s", Token: 1, Outcome: OK, Lease: mk("s", 1, 30000, 0, 300, 30300, 300), Session: session},
		Entry{Client: 2, Op: Get, Outcome: OK, Lease: mk("s", 1, 30000, 0, 450, 30450, 500)},
		Entry{Client: 1, Op: Led, Holder: "s", Token: 1, Session: session},
		Entry{Client: 1, Op: Release, Holder: "s", Token: 1, Outcome: Maybe, Session: session},
		Entry{Client: 3, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: Held, Lease: mk("s", 1, 30000, 0, 450, 30450, 1000)},
		Entry{Client: 2, Op: Get, Outcome: OK, Lease: mk("s", 1, 30000, 0, 450, 1400, 1450)},
		Entry{Client: 3, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 1500, 1500, 2500, 1500)},
	)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	es[3].Call, es[3].Return = base, base.Add(time.Duration(ledUntil)*time.Millisecond)
	return es
}

// TestSessionHolding: the instance's unseen renewals and its release on
// the session's death are legal for a session holder, and only for one;
// the agent's term must end before the next holding begins.
func TestSessionHolding(t *testing.T) {
	final := map[string]*lease.Lease{"x": mk("b", 2, 1000, 1500, 1500, 2500, 3000)}

	legal := sessionHistory(900, true)
	if res := Check(legal, final); res.Count != 0 {
		t.Errorf("violations %v in a legal session history", res.Violations)
	}
	if lin := Linearizable(legal, 10*time.Second); lin.Result != porcupine.Ok {
		t.Errorf("porcupine: %v, want Ok", lin.Result)
	}

	late := sessionHistory(1600, true) // the agent led past b's acquire
	if res := Check(late, final); res.Count != 1 || !strings.Contains(fmt.Sprint(res.Violations), `"s" led token 1 until`) {
		t.Errorf("Check found %v, want the term overlapping token 2", res.Violations)
	}

	plain := sessionHistory(900, false) // the same answers without a session
	if lin := Linearizable(plain, 10*time.Second); lin.Result != porcupine.Illegal {
		t.Errorf("porcupine: %v, want Illegal for a plain holding renewed by nobody", lin.Result)
	}
}

// TestSessionHolderStillOverlaps: a session holder's own acknowledged
// writes still bound the next holding: a write showing it live after the
// next holding began is an overlap.
func TestSessionHolderStillOverlaps(t *testing.T) {
	es := seq(
		Entry{Client: 1, Op: Acquire, Holder: "s", TTL: 30 * time.Second, Outcome: OK, Lease: mk("s", 1, 30000, 0, 0, 30000, 0), Session: true},
		Entry{Client: 3, Op: Acquire, Holder: "b", TTL: time.Second, Outcome: OK, Lease: mk("b", 2, 1000, 1500, 1500, 2500, 1500)},
		Entry{Client: 1, Op: Renew, Holder: "s", Token: 1, Outcome: OK, Lease: mk("s", 1, 30000, 0, 1600, 31600, 1600), Session: true},
	)
	if res := Check(es, nil); res.Count == 0 || !strings.Contains(fmt.Sprint(res.Violations), "overlap") {
		t.Errorf("Check found %v, want an overlap", res.Violations)
	}
	if lin := Linearizable(es, 10*time.Second); lin.Result != porcupine.Illegal {
		t.Errorf("porcupine: %v, want Illegal", lin.Result)
	}
}

// renewedAcquire is a session holder's acquire answered from the renewal
// its instance wrote because the acquire's answer came back late
// (docs/contract.md §14, S5): decided at 0, renewed at 2000, answered
// then; a read in between shows the first write. session false records
// the same answers as plain operations.
func renewedAcquire(session bool) []Entry {
	es := seq(
		Entry{Client: 1, Op: Acquire, Holder: "s", TTL: time.Second, Outcome: OK, Lease: mk("s", 1, 1000, 0, 2000, 3000, 2000), Session: session},
		Entry{Client: 2, Op: Get, Outcome: OK, Lease: mk("s", 1, 1000, 0, 0, 1000, 500)},
		Entry{Client: 2, Op: Get, Outcome: OK, Lease: mk("s", 1, 1000, 0, 2000, 3000, 2500)},
	)
	// The acquire was sent before the read and answered after it.
	es[0].Return = es[1].Return.Add(time.Millisecond)
	return es
}

// TestSessionAcquireAnsweredFromItsRenewal: an acquire a session's
// instance wrote twice before answering is legal for a session holder,
// and only for one.
func TestSessionAcquireAnsweredFromItsRenewal(t *testing.T) {
	if lin := Linearizable(renewedAcquire(true), 10*time.Second); lin.Result != porcupine.Ok {
		t.Errorf("porcupine: %v, want Ok for a session acquire answered from its renewal", lin.Result)
	}
	if lin := Linearizable(renewedAcquire(false), 10*time.Second); lin.Result != porcupine.Illegal {
		t.Errorf("porcupine: %v, want Illegal for a plain acquire answered with a renewal nobody sent", lin.Result)
	}
}
