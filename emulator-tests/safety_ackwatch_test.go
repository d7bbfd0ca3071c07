package emulatortests

import (
	"strings"
	"sync"
	"time"
)

// ackWatch reads an agent's trace (rawsession.Agent.Trace, called under
// the agent's lock, in order) for two facts the agent does not tell:
// whether a holding was dropped before any heartbeat of the session was
// acknowledged (such a holding was never led, though Dropped says it was
// "led" until the drop), and where the agent's deadline first passed after
// its holding began, when acks on its socket then moved it again without a
// resume between (its terms ended there: docs/contract.md §14, A3; only a
// resume restarts them).
type ackWatch struct {
	mu       sync.Mutex
	window   time.Duration // the session's
	acked    bool
	neverLed map[string]bool
	deadline time.Time // from the last ack: its heartbeat's send time + window × 0.9
	since    time.Time // lapses before it do not count (arm)
	resumed  bool      // a resume was answered since the last ack
	lapse    time.Time // the first deadline passed without a resume before the next ack
}

// setWindow sets the session's window.
func (w *ackWatch) setWindow(d time.Duration) {
	w.mu.Lock()
	w.window = d
	w.mu.Unlock()
}

// arm makes only the lapses after at count.
func (w *ackWatch) arm(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.since, w.lapse = at, time.Time{}
}

// lapsed returns the first lapse since arm, if any.
func (w *ackWatch) lapsed() (time.Time, bool) {
	if w == nil {
		return time.Time{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lapse, !w.lapse.IsZero()
}

// note reads one trace line ("15:04:05.000000 message").
func (w *ackWatch) note(line string) {
	stamp, msg, _ := strings.Cut(line, " ")
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case strings.HasPrefix(msg, "resumed on "):
		w.resumed = true
	case strings.HasPrefix(msg, "ack on "):
		w.acked = true
		f := strings.Fields(msg)
		at, sent := clockTime(stamp), clockTime(f[len(f)-1])
		if !w.deadline.IsZero() && at.After(w.deadline) && w.deadline.After(w.since) && !w.resumed && w.lapse.IsZero() && !w.since.IsZero() {
			w.lapse = w.deadline
		}
		w.resumed = false
		w.deadline = sent.Add(w.window * 9 / 10)
	case strings.HasPrefix(msg, "dropped ") && !w.acked:
		if w.neverLed == nil {
			w.neverLed = map[string]bool{}
		}
		w.neverLed[strings.Fields(msg)[1]] = true
	}
}

// clockTime reads a trace's time of day (UTC, 15:04:05.000000) as the
// latest such time not after 12 h from now.
func clockTime(s string) time.Time {
	c, err := time.Parse("15:04:05.000000", s)
	if err != nil {
		return time.Time{}
	}
	now := time.Now().UTC()
	t := time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), c.Second(), c.Nanosecond(), time.UTC)
	if t.After(now.Add(12 * time.Hour)) {
		t = t.AddDate(0, 0, -1)
	}
	return t
}

// led reports whether the holding of name may have been led: false when it
// was dropped before any acknowledged heartbeat.
func (w *ackWatch) led(name string) bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.neverLed[name]
}
