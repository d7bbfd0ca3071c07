package spanner

import (
	"context"
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	for attempt := range 70 {
		step := min(retryBase<<min(attempt, 30), retryCap)
		if attempt >= 30 {
			step = retryCap
		}
		for _, u := range []float64{0, 0.5, 0.999999} {
			d := backoff(attempt, u)
			if d < step/2 || d > step {
				t.Fatalf("backoff(%d, %v) = %v, want within [%v, %v]", attempt, u, d, step/2, step)
			}
		}
	}
	if backoff(0, 0) != retryBase/2 || backoff(100, 0.999999) > retryCap {
		t.Fatalf("backoff ends: %v, %v", backoff(0, 0), backoff(100, 0.999999))
	}
	if backoff(3, 0) <= backoff(2, 0) {
		t.Fatal("backoff does not grow with the attempt")
	}
}

func TestSleepStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	if err := sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("sleep(cancelled) = %v, want context.Canceled", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("sleep did not return when ctx was cancelled")
	}
	if err := sleep(t.Context(), time.Millisecond); err != nil {
		t.Fatalf("sleep(1ms) = %v", err)
	}
}
