package emulatortests

import (
	"sync"
	"testing"
	"time"
)

// pooled runs do(0) … do(n-1) on workers goroutines, a closed loop (each
// worker takes the next as soon as it is free), and returns how long they
// took. The benchmark's timer runs only meanwhile.
func pooled(b *testing.B, n, workers int, do func(i int)) time.Duration {
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				do(i)
			}
		})
	}
	b.ResetTimer()
	start := time.Now()
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed
}

// paced starts do(0) … do(n-1) at rate a second, an open loop (each
// starts on schedule, whatever the others are doing), waits for all of
// them, and returns how long they took and the latency of each. The
// benchmark's timer runs only meanwhile.
func paced(b *testing.B, n, rate int, do func(i int)) (time.Duration, latencies) {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		lat = make(latencies, 0, n)
	)
	b.ResetTimer()
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))))
		wg.Go(func() {
			t0 := time.Now()
			do(i)
			mu.Lock()
			lat = append(lat, time.Since(t0))
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	return elapsed, lat
}
