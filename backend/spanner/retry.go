package spanner

import (
	"context"
	"time"
)

// Bounds of the pause between two attempts of a read-write transaction.
const (
	// retryBase is the pause before the first retry (before jitter).
	retryBase = 2 * time.Millisecond
	// retryCap is the longest pause between two attempts.
	retryCap = 250 * time.Millisecond
)

// backoff returns the pause before retry number attempt (0 for the first):
// retryBase doubled per attempt and capped at retryCap, of which the upper
// half is random ("equal jitter", u uniform in [0, 1)), so contenders spread
// out while every pause stays at least half its step.
func backoff(attempt int, u float64) time.Duration {
	step := retryCap
	if attempt < 30 {
		step = min(retryBase<<attempt, retryCap)
	}
	half := step / 2
	return half + time.Duration(u*float64(step-half))
}

// sleep pauses for d or until ctx is done, whichever comes first, and
// returns ctx.Err() in the second case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
