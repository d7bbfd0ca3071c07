package auth

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock is a settable clock for Limiter.now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestLimiter(perSecond float64, burst int) (*Limiter, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := NewLimiter(perSecond, burst)
	l.now = clock.now
	return l, clock
}

func (l *Limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

func TestLimiterBurstThenRecovers(t *testing.T) {
	// 0.5 requests a second, burst 3: the bucket refills in 6 s, one token
	// every 2 s.
	l, clock := newTestLimiter(0.5, 3)
	for i := range 3 {
		if ok, _ := l.Allow("alice"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, retry := l.Allow("alice")
	if ok || retry != 2*time.Second {
		t.Fatalf("request after the burst = %v, %v, want refused, retry after 2s", ok, retry)
	}
	// Another key has its own bucket.
	if ok, _ := l.Allow("bob"); !ok {
		t.Fatal("bob refused because of alice")
	}
	clock.advance(500 * time.Millisecond)
	if ok, retry := l.Allow("alice"); ok || retry != 2*time.Second {
		// 1.5 s to go, rounded up to whole seconds.
		t.Fatalf("after 0.5 s = %v, %v, want refused, retry after 2s", ok, retry)
	}
	clock.advance(1100 * time.Millisecond)
	if ok, retry := l.Allow("alice"); ok || retry != time.Second {
		// 0.4 s to go: at least one second.
		t.Fatalf("after 1.6 s = %v, %v, want refused, retry after 1s", ok, retry)
	}
	clock.advance(400 * time.Millisecond)
	if ok, _ := l.Allow("alice"); !ok {
		t.Fatal("refused after the retry time")
	}
	if ok, _ := l.Allow("alice"); ok {
		t.Fatal("a second request allowed with one token refilled")
	}
	// After the whole refill time the full burst is back.
	clock.advance(6 * time.Second)
	for i := range 3 {
		if ok, _ := l.Allow("alice"); !ok {
			t.Fatalf("request %d of the refilled burst refused", i+1)
		}
	}
}

func TestLimiterRetryAfterRoundsUp(t *testing.T) {
	tests := []struct {
		perSecond float64
		want      time.Duration
	}{
		{100, time.Second},      // 10 ms to go
		{1, time.Second},        // exactly 1 s
		{0.3, 4 * time.Second},  // 3.33 s
		{1.0 / 60, time.Minute}, // 60 s
		{1e-6, 1e6 * time.Second},
	}
	for _, tt := range tests {
		l, _ := newTestLimiter(tt.perSecond, 1)
		l.Allow("k")
		ok, retry := l.Allow("k")
		if ok || retry != tt.want || retry%time.Second != 0 {
			t.Errorf("rate %v: second request = %v, %v, want refused, %v", tt.perSecond, ok, retry, tt.want)
		}
	}
	// A retry time too long for a Duration saturates instead of wrapping.
	l, _ := newTestLimiter(1e-300, 1)
	l.Allow("k")
	if ok, retry := l.Allow("k"); ok || retry < 100*365*24*time.Hour {
		t.Errorf("tiny rate: %v, %v, want refused with a huge retry time", ok, retry)
	}
}

func TestLimiterEvictsIdleBuckets(t *testing.T) {
	l, clock := newTestLimiter(1, 2) // refills in 2 s
	for i := range 100 {
		l.Allow(fmt.Sprint("key", i))
	}
	if n := l.size(); n != 100 {
		t.Fatalf("%d buckets, want 100", n)
	}
	l.Allow("key0") // empties key0
	clock.advance(1500 * time.Millisecond)
	l.Allow("busy")
	if n := l.size(); n != 101 {
		t.Fatalf("%d buckets after 1.5 s, want 101: none is full yet", n)
	}
	clock.advance(600 * time.Millisecond)
	l.Allow("busy") // 2.1 s after the others were last used: sweep
	if n := l.size(); n != 1 {
		t.Fatalf("%d buckets after 2.1 s, want 1 (busy)", n)
	}
	// Eviction does not change behaviour: an evicted key starts full, as
	// its bucket would be.
	for i := range 2 {
		if ok, _ := l.Allow("key0"); !ok {
			t.Fatalf("request %d of key0's burst after eviction refused", i+1)
		}
	}
	if ok, _ := l.Allow("key0"); ok {
		t.Fatal("key0 allowed beyond its burst")
	}
	// A refused key is still in use: not evicted before it refills.
	clock.advance(1100 * time.Millisecond)
	l.Allow("key0")
	clock.advance(1100 * time.Millisecond) // sweep due: busy idle 2.2 s, key0 1.1 s
	l.Allow("other")
	l.mu.Lock()
	_, key0 := l.buckets["key0"]
	_, busy := l.buckets["busy"]
	l.mu.Unlock()
	if !key0 || busy {
		t.Errorf("after sweep: key0 kept=%v (want true), busy kept=%v (want false)", key0, busy)
	}
}

func TestLimiterSweepIsAmortized(t *testing.T) {
	// With a long refill time, a sweep does not run on every call: idle
	// buckets stay until the next sweep is due.
	l, clock := newTestLimiter(0.1, 1) // refills in 10 s
	l.Allow("a")                       // first call sweeps; next sweep in 10 s
	clock.advance(9 * time.Second)
	l.Allow("b")
	clock.advance(2 * time.Second) // a idle 11 s, but the next sweep is due only now
	l.Allow("c")
	if n := l.size(); n != 2 {
		t.Errorf("%d buckets, want 2 (b, c)", n)
	}
}

func TestLimiterUnlimited(t *testing.T) {
	var nilLimiter *Limiter
	for name, l := range map[string]*Limiter{
		"nil": nilLimiter, "zero rate": NewLimiter(0, 5), "negative rate": NewLimiter(-1, 5),
		"NaN": NewLimiter(math.NaN(), 5), "infinite": NewLimiter(math.Inf(1), 0),
	} {
		for range 1000 {
			if ok, retry := l.Allow("k"); !ok || retry != 0 {
				t.Fatalf("%s: refused (%v)", name, retry)
			}
		}
	}
}

func TestLimiterBurstBelowOne(t *testing.T) {
	l, _ := newTestLimiter(1, 0)
	if ok, _ := l.Allow("k"); !ok {
		t.Fatal("burst 0 must be taken as 1")
	}
	if ok, _ := l.Allow("k"); ok {
		t.Fatal("second request allowed with burst 1")
	}
}

func TestLimiterConcurrent(t *testing.T) {
	// Exactly burst requests pass when nobody's clock moves.
	l, _ := newTestLimiter(1, 50)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if ok, _ := l.Allow("shared"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
				l.Allow(fmt.Sprint(time.Now().UnixNano()))
			}
		})
	}
	wg.Wait()
	if allowed != 50 {
		t.Errorf("%d requests allowed, want the burst of 50", allowed)
	}
}

func TestLimiterRealClock(t *testing.T) { synctest.Test(t, limiterRealClock) }

// limiterRealClock is TestLimiterRealClock's body, run in a synctest bubble: fake time.
func limiterRealClock(t *testing.T) {
	l := NewLimiter(1000, 1)
	l.Allow("k")
	if ok, retry := l.Allow("k"); ok || retry != time.Second {
		t.Fatalf("second request = %v, %v, want refused with retry 1s", ok, retry)
	}
	<-time.After(5 * time.Millisecond) // the bubble's clock: time.Now, as the limiter's default
	if ok, _ := l.Allow("k"); !ok {
		t.Fatal("refused after the refill time")
	}
}
