package backend_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

func TestAwaitDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	backend.AwaitDeadline(ctx)
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("AwaitDeadline 20ms before the deadline returned with ctx.Err() = %v, want it done", ctx.Err())
	}

	far, cancel2 := context.WithTimeout(t.Context(), time.Hour)
	defer cancel2()
	start := time.Now()
	backend.AwaitDeadline(far)
	backend.AwaitDeadline(t.Context()) // no deadline
	if d := time.Since(start); d > backend.DeadlineSlack {
		t.Fatalf("AwaitDeadline far from a deadline (or without one) took %v, want at once", d)
	}
}
