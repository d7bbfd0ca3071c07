package auth

import (
	"testing"
	"time"
)

// TestAllowKeepingLeavesTheReserve: requests of lower priority take only
// the tokens above keep, and wait for the bucket to refill past it; Allow
// still gets the reserve.
func TestAllowKeepingLeavesTheReserve(t *testing.T) {
	l, clock := newTestLimiter(1, 4) // a token a second, burst 4
	for i := range 2 {
		if ok, _ := l.AllowKeeping("alice", 2); !ok {
			t.Fatalf("write %d above the reserve refused", i+1)
		}
	}
	ok, retry := l.AllowKeeping("alice", 2)
	if ok || retry != time.Second {
		t.Fatalf("a write into the reserve = %v, %v; want refused, retry after 1s", ok, retry)
	}
	for i := range 2 {
		if ok, _ := l.Allow("alice"); !ok {
			t.Fatalf("request %d of the reserve refused", i+1)
		}
	}
	if ok, retry := l.AllowKeeping("alice", 2); ok || retry != 3*time.Second {
		t.Fatalf("a write with the bucket empty = %v, %v; want refused, retry after 3s", ok, retry)
	}
	clock.advance(3 * time.Second)
	if ok, _ := l.AllowKeeping("alice", 2); !ok {
		t.Fatal("a write refused once the bucket refilled past the reserve")
	}
	// keep is capped at burst-1: a write can always take the last token of
	// a full bucket.
	if ok, _ := l.AllowKeeping("bob", 100); !ok {
		t.Fatal("a write with keep past the burst refused on a full bucket")
	}
	if l.Burst() != 4 || (*Limiter)(nil).Burst() != 0 {
		t.Fatal("Burst")
	}
	if ok, _ := (*Limiter)(nil).AllowKeeping("x", 1); !ok {
		t.Fatal("a nil limiter refused")
	}
}
