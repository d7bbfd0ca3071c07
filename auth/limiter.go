package auth

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter is a set of token buckets, one per key (for example a principal or
// a client address), each refilling at the same rate up to the same burst.
// A bucket that has been idle long enough to be full again is the same as a
// new one, so such buckets are dropped, on access, in a sweep that runs at
// most once per refill time (and at most once a second): memory is bounded by
// the keys used within the last two refill times (or refill time plus a
// second, if that is longer). It starts no goroutine. It is safe for
// concurrent use (one mutex for all keys); a nil *Limiter allows everything.
type Limiter struct {
	limit rate.Limit
	burst int
	idle  time.Duration // time to refill an empty bucket: burst / limit
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket // nil: unlimited
	nextSweep time.Time
}

// bucket is one key's token bucket and when it was last used.
type bucket struct {
	lim  *rate.Limiter
	last time.Time
}

// NewLimiter returns a limiter that lets each key make perSecond requests a
// second on average, and up to burst at once. perSecond <= 0 (or NaN, or
// +Inf) means no limit: Allow always succeeds. A burst below 1 is taken as 1.
func NewLimiter(perSecond float64, burst int) *Limiter {
	if !(perSecond > 0) || math.IsInf(perSecond, 1) {
		return &Limiter{}
	}
	burst = max(burst, 1)
	return &Limiter{
		limit:   rate.Limit(perSecond),
		burst:   burst,
		idle:    seconds(float64(burst) / perSecond),
		now:     time.Now,
		buckets: make(map[string]*bucket),
	}
}

// Allow takes a token from key's bucket. If the bucket is empty it returns
// false and how long until a token is available, rounded up to whole seconds
// and at least one second, for a Retry-After header.
func (l *Limiter) Allow(key string) (ok bool, retryAfter time.Duration) {
	return l.AllowKeeping(key, 0)
}

// AllowKeeping is Allow for requests that must leave keep tokens in the
// bucket for those Allow serves: it takes a token only while more than keep
// are there, and otherwise says how long until there are. The session
// writes of a principal take from its bucket this way, keeping half of it
// for its upgrades: a write never leaves a resume's upgrade refused. keep
// is capped at the burst less one.
func (l *Limiter) AllowKeeping(key string, keep int) (ok bool, retryAfter time.Duration) {
	if l == nil || l.buckets == nil {
		return true, 0
	}
	keep = max(min(keep, l.burst-1), 0)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.last = now
	if b.lim.TokensAt(now) >= float64(keep+1) && b.lim.AllowN(now, 1) {
		return true, 0
	}
	wait := seconds((float64(keep+1) - b.lim.TokensAt(now)) / float64(l.limit))
	secs := wait / time.Second
	if wait%time.Second != 0 || secs == 0 {
		secs++
	}
	if secs > math.MaxInt64/time.Second {
		return false, time.Duration(math.MaxInt64) / time.Second * time.Second
	}
	return false, secs * time.Second
}

// Burst is the bucket size (0 for a limiter that allows everything).
func (l *Limiter) Burst() int {
	if l == nil {
		return 0
	}
	return l.burst
}

// sweep drops the buckets idle for at least the refill time, if the last
// sweep was long enough ago. l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	if now.Before(l.nextSweep) {
		return
	}
	for k, b := range l.buckets {
		if now.Sub(b.last) >= l.idle {
			delete(l.buckets, k)
		}
	}
	l.nextSweep = now.Add(max(l.idle, time.Second))
}

// seconds converts s seconds to a Duration, saturating instead of
// overflowing.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}
