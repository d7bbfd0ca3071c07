package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCloseWithinBoundsAHangingClose: a backend close that never returns
// (a hung RPC) is abandoned at the deadline, the end of the shutdown
// budget, with an error saying so, so that the service still exits; a
// close that returns in time reports its own result.
func TestCloseWithinBoundsAHangingClose(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hanging := func() error { <-release; return nil }
	deadline := time.Now().Add(50 * time.Millisecond)
	err := closeWithin(hanging, deadline)
	if err == nil || !strings.Contains(err.Error(), "shutdown budget") {
		t.Fatalf("closeWithin(hanging close) = %v, want an error about the shutdown budget", err)
	}
	if time.Now().Before(deadline) {
		t.Errorf("closeWithin gave up before its deadline")
	}

	closeErr := errors.New("close: boom")
	if err := closeWithin(func() error { return closeErr }, time.Now().Add(time.Minute)); !errors.Is(err, closeErr) {
		t.Errorf("closeWithin(failing close) = %v, want %v", err, closeErr)
	}
	if err := closeWithin(func() error { return nil }, time.Time{}); err != nil {
		t.Errorf("closeWithin(close, zero deadline) = %v, want nil", err)
	}
}
