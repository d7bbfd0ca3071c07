package httpapi_test

import (
	"sync"
	"testing"
	"time"
)

// waitNotes records the waiting acquires a Manager reported beginning to
// wait (lease.Config.OnWait), so that a test waits for a wait to begin
// instead of sleeping and hoping it has.
type waitNotes struct {
	mu      sync.Mutex
	began   map[string]int // "name/holder": how many times
	changed chan struct{}  // closed, and replaced, on each note
}

func newWaitNotes() *waitNotes {
	return &waitNotes{began: map[string]int{}, changed: make(chan struct{})}
}

// note is the Manager's OnWait.
func (w *waitNotes) note(name, holder string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.began[name+"/"+holder]++
	close(w.changed)
	w.changed = make(chan struct{})
}

// await returns once the acquire of name by each of holders has begun to
// wait, failing t if one has not within 10 s.
func (w *waitNotes) await(t *testing.T, name string, holders ...string) {
	t.Helper()
	limit := time.NewTimer(10 * time.Second)
	defer limit.Stop()
	for _, h := range holders {
		for {
			w.mu.Lock()
			n, changed := w.began[name+"/"+h], w.changed
			w.mu.Unlock()
			if n > 0 {
				break
			}
			select {
			case <-changed:
			case <-limit.C:
				t.Fatalf("the acquire of %s by %s did not begin to wait within 10s", name, h)
			}
		}
	}
}

// waitsOf holds the waitNotes of each Manager (or Handler) the tests'
// servers made.
var waitsOf sync.Map

// waitsFor returns the waitNotes registered for key.
func waitsFor(t *testing.T, key any) *waitNotes {
	t.Helper()
	w, ok := waitsOf.Load(key)
	if !ok {
		t.Fatalf("no waitNotes for %T", key)
	}
	return w.(*waitNotes)
}
