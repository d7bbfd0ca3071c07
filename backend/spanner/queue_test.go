package spanner

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestNameQueueOneAtATimePerName(t *testing.T) {
	var q nameQueue
	var inA, maxA, inB atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		name, in := "a", &inA
		if i%2 == 1 {
			name, in = "b", &inB
		}
		wg.Go(func() {
			release, err := q.acquire(t.Context(), name)
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			n := in.Add(1)
			if name == "a" && n > maxA.Load() {
				maxA.Store(n)
			}
			time.Sleep(time.Millisecond)
			in.Add(-1)
		})
	}
	wg.Wait()
	if maxA.Load() != 1 {
		t.Fatalf("%d holders of name a at once, want 1", maxA.Load())
	}
	if len(q.slots) != 0 {
		t.Fatalf("slots left after every release: %v", q.slots)
	}
}

func TestNameQueueWaitEndsWithContext(t *testing.T) {
	var q nameQueue
	release, err := q.acquire(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := q.acquire(ctx, "a"); err != context.DeadlineExceeded {
		t.Fatalf("acquire of a taken name = %v, want context.DeadlineExceeded", err)
	}
	other, err := q.acquire(t.Context(), "b")
	if err != nil {
		t.Fatalf("acquire of another name while a is taken: %v", err)
	}
	other()
	release()
	if len(q.slots) != 0 {
		t.Fatalf("slots left: %v", q.slots)
	}
}
