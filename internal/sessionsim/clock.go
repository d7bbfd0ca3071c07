package sessionsim

import (
	"math"
	"time"
)

// Clock is an instance's monotonic clock (session.Clock): it runs at Rate
// times the bubble's clock from the moment it was made, and, like a process
// under SIGSTOP, it keeps running while its instance is paused, but no
// callback of it runs until the instance wakes.
type Clock struct {
	in   *Instance
	Rate float64
	t0   time.Time
}

// Now is the instance's time.
func (c *Clock) Now() time.Time {
	now := time.Now()
	return c.t0.Add(time.Duration(float64(now.Sub(c.t0)) * c.Rate))
}

// real is how long d on this clock lasts on the bubble's, rounded up.
func (c *Clock) real(d time.Duration) time.Duration {
	return time.Duration(math.Ceil(float64(d) / c.Rate))
}

// after calls f in its own goroutine once d has passed on this clock and
// the instance is awake.
func (c *Clock) after(d time.Duration, f func()) *Timer {
	return &Timer{c: c, t: time.AfterFunc(c.real(d), func() {
		c.in.awaitAwake()
		f()
	})}
}

// Timer is a timer of a Clock (session.Timer).
type Timer struct {
	c *Clock
	t *time.Timer
}

// Stop stops the timer.
func (t *Timer) Stop() bool { return t.t.Stop() }

// Reset makes the timer fire after d on its clock.
func (t *Timer) Reset(d time.Duration) bool { return t.t.Reset(t.c.real(d)) }
