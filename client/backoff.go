package client

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with jitter: the n-th retry
// (n = 0, 1, …) waits a random time in [d/2, d], d = min(Max, Initial ×
// Multiplier^n), so retries of many clients spread out instead of arriving
// together.
type Backoff struct {
	// Initial is the base delay before the first retry. Default 100ms.
	Initial time.Duration
	// Max caps the delay. Default 2s.
	Max time.Duration
	// Multiplier grows the delay after each retry, ≥ 1. Default 2.
	Multiplier float64
}

// DefaultBackoff is the Backoff a zero Backoff means.
var DefaultBackoff = Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}

// withDefaults fills zero fields and checks the rest; field names the
// Backoff in errors.
func (b Backoff) withDefaults(field string) (Backoff, error) {
	if b.Initial == 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max == 0 {
		b.Max = max(DefaultBackoff.Max, b.Initial)
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultBackoff.Multiplier
	}
	switch {
	case b.Initial < 0:
		return b, fmt.Errorf("%s.Initial %v must be positive", field, b.Initial)
	case b.Max < b.Initial:
		return b, fmt.Errorf("%s.Max %v must be at least Initial %v", field, b.Max, b.Initial)
	case b.Multiplier < 1:
		return b, fmt.Errorf("%s.Multiplier %v must be at least 1", field, b.Multiplier)
	}
	return b, nil
}

// Delay returns the jittered delay before retry n (n = 0 for the first
// retry).
func (b Backoff) Delay(n int) time.Duration {
	d := float64(b.Initial)
	for i := 0; i < n && d < float64(b.Max); i++ {
		d *= b.Multiplier
	}
	d = min(d, float64(b.Max))
	return time.Duration(d/2 + rand.Float64()*d/2)
}
