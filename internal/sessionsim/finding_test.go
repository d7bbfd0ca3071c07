package sessionsim

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestResumeHeldBack is issue 36's finding 1, scripted: the agent's
// resume R1 to instance 1 waits in that instance's socket buffer; the
// agent gives up on the socket and resumes on instance 2 (R2); then
// instance 1 reads R1. Before the fix instance 1 took the session over,
// found no heartbeat for a window and released the lease to the waiting
// contender while instance 2 still acked every heartbeat; now R1's epoch
// is below R2's and instance 1 refuses it (409 session_conflict).
func TestResumeHeldBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = time.Second
		w, err := NewWorld(Config{Instances: 3, Window: window, LeaseTTL: 30 * time.Second,
			Latencies: []time.Duration{1100 * time.Microsecond, 1300 * time.Microsecond, 1700 * time.Microsecond}})
		if err != nil {
			t.Fatal(err)
		}
		a := w.NewAgent("agent")
		time.Sleep(100 * time.Millisecond) // opened on instance 0; the next dial goes to 1
		w.Acquire(a, "L0", 0)
		time.Sleep(100 * time.Millisecond)
		w.Contend("contender", "L0", 2*time.Second, time.Second, time.Second)
		w.HoldIn(1)
		w.Cut(w.Current(a)) // the agent resumes on instance 1: R1 waits
		time.Sleep(100 * time.Millisecond)
		w.Drop(w.Current(a)) // it gives up, and resumes on instance 2: R2
		time.Sleep(2 * window)
		w.ReleaseIn(1) // instance 1 reads R1
		time.Sleep(5 * window)
		synctest.Wait()
		leads := w.check.deadline(a.Spec).After(time.Now())
		for _, v := range w.Violations() {
			t.Errorf("the invariant is broken: %s: %s", v.Kind, v.Detail)
		}
		if t.Failed() {
			t.Log("trace:\n" + strings.Join(w.Trace(300), "\n"))
		}
		if err := w.Close(); err != nil {
			t.Error(err)
		}
		synctest.Wait()
		if !leads {
			t.Errorf("the agent no longer leads: the scenario did not keep its session on instance 2\n%s", strings.Join(w.Trace(300), "\n"))
		}
	})
}
