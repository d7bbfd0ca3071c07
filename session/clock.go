package session

import "time"

// Clock is the time a Registry and its sessions read: every monotonic
// time the rules of docs/contract.md §14 compare (heartbeat receipts,
// write send times, the death timer, the renewal rounds). Tests and the
// deterministic simulation (internal/sessionsim) give each instance its
// own, running at a rate within the drift margin.
type Clock interface {
	// Now is the current time on this clock.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed on this
	// clock.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer of a Clock.
type Timer interface {
	// Stop stops the timer; false when it had fired or been stopped.
	Stop() bool
	// Reset makes the timer fire after d; false when it had fired or been
	// stopped.
	Reset(d time.Duration) bool
}

// realClock is the process's clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// since is the time passed on c since t.
func since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }
