package e2e

import (
	"sync"
	"time"
)

// Changes lets a test wait for a condition on state that other goroutines
// change (a process's output, what a subscriber received): the writer calls
// Notify after each change, and Await tests the condition again after
// each one, never on a timer. The zero value is ready to use.
type Changes struct {
	mu sync.Mutex
	ch chan struct{} // closed, and replaced, by Notify
}

// Notify wakes every Await to test its condition again.
func (c *Changes) Notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// next returns the channel the next Notify closes.
func (c *Changes) next() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Await returns true once cond holds, testing it now and after each
// Notify, or false when limit passes first.
func (c *Changes) Await(limit time.Duration, cond func() bool) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		changed := c.next() // before cond: a change meanwhile is not missed
		if cond() {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		}
	}
}
