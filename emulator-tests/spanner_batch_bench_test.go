package emulatortests

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
)

// BenchmarkSpannerBatch runs increments of distinct leases from 64
// goroutines through a Loop over the Store, as a busy instance's renewals,
// with batching off (BatchMax=1) and on; it reports updates per second and
// attempts per read-write transaction:
//
//	go test -run '^$' -bench SpannerBatch -benchtime 2000x ./emulator-tests/
func BenchmarkSpannerBatch(b *testing.B) {
	for _, max := range []int{1, spannerstore.DefaultBatchMax} {
		b.Run(fmt.Sprintf("BatchMax=%d", max), func(b *testing.B) {
			s := spannerStore(b, spannerstore.WithSerialTransactions(true), spannerstore.WithBatchMax(max),
				spannerstore.WithFastPath(spannerstore.FastPathNever))
			loop := backend.NewLoop(s)
			prefix := spannerID("bench.batch.")
			const workers = 64
			work := make(chan int)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for i := range work {
						name := fmt.Sprintf("%s%04d", prefix, i%1000)
						if _, err := loop.Update(b.Context(), name, func(snap backend.Snapshot) (*backend.Record, error) {
							return counterRecord(snap), nil
						}); err != nil {
							b.Errorf("Update(%s): %v", name, err)
						}
					}
				})
			}
			attempts0, txns0, _ := s.BatchStats()
			start := time.Now()
			b.ResetTimer()
			for i := range b.N {
				work <- i
			}
			close(work)
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "updates/s")
			if attempts, txns, _ := s.BatchStats(); txns > txns0 {
				b.ReportMetric(float64(attempts-attempts0)/float64(txns-txns0), "attempts/txn")
			}
		})
	}
}
