package main

import (
	"fmt"
	"time"
)

// closeWithin calls closeFn and waits for it until deadline (a zero
// deadline: defaultShutdown from now). Past the deadline it returns an error
// and leaves closeFn running: the process is about to exit, and Cloud Run
// kills it 10 s after SIGTERM anyway, so a backend client that hangs on
// close (a network partition, a stuck RPC) must not keep the service from
// exiting after its shutdown budget.
func closeWithin(closeFn func() error, deadline time.Time) error {
	if deadline.IsZero() {
		deadline = time.Now().Add(defaultShutdown)
	}
	done := make(chan error, 1)
	go func() { done <- closeFn() }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("still closing at the end of the shutdown budget (%s); exiting without waiting for it", deadline.Format(time.RFC3339Nano))
	}
}
