package client

import "time"

// Clock is a Keeper's (and its Electors') source of local monotonic time.
// The default reads the time package; tests inject a fake one so that they
// need no sleeps.
// Only durations between two readings of one Clock are ever used: a Clock's
// time is never compared with a server time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now.
	NewTimer(d time.Duration) Timer
}

// Timer is a timer of a Clock, like *time.Timer.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset makes the timer fire d after now, as time.Timer.Reset does
	// since Go 1.23 (no stale value is left in C).
	Reset(d time.Duration) bool
}

// SystemClock is the Clock of the time package.
type SystemClock struct{}

// Now returns time.Now(), with its monotonic reading.
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (s sysTimer) C() <-chan time.Time        { return s.t.C }
func (s sysTimer) Stop() bool                 { return s.t.Stop() }
func (s sysTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }
