package emulatortests

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/leasesvc/leasesvc/backend"
	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
)

// BenchmarkSpannerCeiling measures what bounds the Spanner emulator's
// throughput: how many read-write transactions a second it completes for
// one client, and how many distinct-row writes one batched transaction can
// carry. Each sub-benchmark makes b.N × batch writes of new rows (counter
// records through a Loop over one Store), from max(64, 2 × batch)
// goroutines flat out, so that each transaction finds a full batch
// waiting; "batch=1" is batching off (one transaction at a time, as the
// service runs on the emulator). It reports transactions a second, ms per
// transaction, writes per transaction and writes a second:
//
//	go test -run '^$' -bench SpannerCeiling -benchtime 20x ./emulator-tests/
func BenchmarkSpannerCeiling(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := spannerStore(b, spannerstore.WithLoop(backend.WithOneAtATime(true)), spannerstore.WithBatchMax(batch),
				spannerstore.WithLoop(backend.WithReadFirst(spannerstore.FastPathNever)))
			loop := backend.NewLoop(s)
			prefix := spannerID(fmt.Sprintf("bench.ceiling%d.", batch))
			n := b.N * batch
			attempts0, txns0, _ := s.BatchStats()
			elapsed := pooled(b, n, max(64, 2*batch), func(i int) {
				name := fmt.Sprintf("%s%06d", prefix, i)
				if err := increment(b.Context(), loop, name); err != nil {
					b.Errorf("Update(%s): %v", name, err)
				}
			})
			attempts, txns := int64(n), int64(n) // batching off: the batcher counts nothing
			if a, t, _ := s.BatchStats(); t > txns0 {
				attempts, txns = a-attempts0, t-txns0
			}
			b.ReportMetric(float64(txns)/elapsed.Seconds(), "txn/s")
			b.ReportMetric(float64(elapsed.Milliseconds())/float64(txns), "ms/txn")
			b.ReportMetric(float64(attempts)/float64(txns), "writes/txn")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "writes/s")
		})
	}
}

// BenchmarkSpannerSetup10k sets up 10,000 new leases through the batcher
// directly, as leasebench's throughput scenario does through the service:
// acquires of distinct leases from 64 goroutines, each bounded by the
// service's request timeout (10 s), over one Store ("clients=1") and over
// two Stores on two clients of the same database, as two service instances
// ("clients=2"). It reports leases set up a second, the failures and the
// acquire p50/p99, and logs the first errors:
//
//	go test -run '^$' -bench SpannerSetup10k -benchtime 1x -timeout 30m ./emulator-tests/
func BenchmarkSpannerSetup10k(b *testing.B) {
	for _, clients := range []int{1, 2} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			db, _ := spannerSetup(b)
			stores := []*spannerstore.Store{spannerStore(b, spannerstore.WithLoop(backend.WithOneAtATime(true)))}
			if clients == 2 {
				second, err := spanner.NewClient(context.Background(), db)
				if err != nil {
					b.Fatalf("spanner.NewClient: %v", err)
				}
				b.Cleanup(second.Close)
				s, err := spannerstore.New(second, spannerstore.WithLoop(backend.WithOneAtATime(true)))
				if err != nil {
					b.Fatalf("spanner.New: %v", err)
				}
				stores = append(stores, s)
			}
			var loops []*backend.Loop
			for _, s := range stores {
				loops = append(loops, backend.NewLoop(s))
			}
			const leases, workers = 10_000, 64
			prefix := spannerID(fmt.Sprintf("bench.setup%d.", clients))
			var (
				mu       sync.Mutex
				lat      latencies
				failed   atomic.Int64
				errs     []error
				timeouts atomic.Int64
				done     atomic.Int64
			)
			start := time.Now()
			elapsed := pooled(b, leases, workers, func(i int) {
				name := fmt.Sprintf("%s%05d", prefix, i)
				ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
				t0 := time.Now()
				err := increment(ctx, loops[i%len(loops)], name)
				took := time.Since(t0)
				cancel()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed.Add(1)
					if errors.Is(err, context.DeadlineExceeded) {
						timeouts.Add(1)
					}
					if len(errs) < 5 {
						errs = append(errs, fmt.Errorf("acquire %d after %v (%d set up, %v in): %w", i, took.Round(time.Millisecond),
							done.Load(), time.Since(start).Round(time.Second), err))
					}
					return
				}
				lat = append(lat, took)
				done.Add(1)
			})
			for _, err := range errs {
				b.Logf("first failures: %v", err)
			}
			var attempts, txns int64
			for _, s := range stores {
				a, t, _ := s.BatchStats()
				attempts, txns = attempts+a, txns+t
				b.Logf("store: %d retried transactions", s.Retries())
			}
			b.ReportMetric(float64(done.Load())/elapsed.Seconds(), "leases/s")
			b.ReportMetric(elapsed.Seconds(), "s")
			b.ReportMetric(float64(failed.Load()), "failed")
			b.ReportMetric(float64(timeouts.Load()), "timeouts")
			if len(lat) > 0 {
				b.ReportMetric(lat.pct(0.5), "p50-ms")
				b.ReportMetric(lat.pct(0.99), "p99-ms")
			}
			if txns > 0 {
				b.ReportMetric(float64(attempts)/float64(txns), "attempts/txn")
			}
		})
	}
}
