// Package fakeclock is a client.Clock that moves only when a test says so,
// so that tests of the Elector need no sleeps.
package fakeclock

import (
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// Clock is a fake client.Clock. Its zero value is not usable; call New.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*timer]struct{}
	change chan struct{} // closed and replaced whenever the set of timers changes
}

var _ client.Clock = (*Clock)(nil)

// New returns a Clock reading start.
func New(start time.Time) *Clock {
	return &Clock{now: start, timers: map[*timer]struct{}{}, change: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches now + d.
func (c *Clock) NewTimer(d time.Duration) client.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing the timers that come due, in
// order of their times.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *timer
		for t := range c.timers {
			if !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		if next.at.After(c.now) {
			c.now = next.at
		}
		delete(c.timers, next)
		c.changed()
		select {
		case next.ch <- c.now:
		default:
		}
	}
	c.now = target
	c.mu.Unlock()
}

// Timers returns how many timers are waiting.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Next returns the time of the earliest waiting timer, and false when none
// waits.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var at time.Time
	for t := range c.timers {
		if at.IsZero() || t.at.Before(at) {
			at = t.at
		}
	}
	return at, !at.IsZero()
}

// changed wakes whoever waits for the set of timers to change; c.mu held.
func (c *Clock) changed() {
	close(c.change)
	c.change = make(chan struct{})
}

// Changed returns a channel closed the next time a timer is set, reset,
// stopped or fired.
func (c *Clock) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.change
}

type timer struct {
	c  *Clock
	ch chan time.Time
	at time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.timers[t]
	delete(t.c.timers, t)
	t.c.changed()
	return active
}

func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	_, active := t.c.timers[t]
	select { // as time.Timer since Go 1.23: no stale value after Reset
	case <-t.ch:
	default:
	}
	delete(t.c.timers, t)
	t.at = t.c.now.Add(d)
	if d <= 0 { // due now: fire at once, as a real timer would
		t.ch <- t.c.now
	} else {
		t.c.timers[t] = struct{}{}
	}
	t.c.changed()
	return active
}
