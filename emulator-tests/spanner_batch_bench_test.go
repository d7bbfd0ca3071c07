package emulatortests

import (
	"fmt"
	"testing"

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
			s := spannerStore(b, spannerstore.WithLoop(backend.WithOneAtATime(true)), spannerstore.WithBatchMax(max),
				spannerstore.WithLoop(backend.WithReadFirst(spannerstore.FastPathNever)))
			loop := backend.NewLoop(s)
			prefix := spannerID("bench.batch.")
			attempts0, txns0, _ := s.BatchStats()
			elapsed := pooled(b, b.N, 64, func(i int) {
				name := fmt.Sprintf("%s%04d", prefix, i%1000)
				if err := increment(b.Context(), loop, name); err != nil {
					b.Errorf("Update(%s): %v", name, err)
				}
			})
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "updates/s")
			if attempts, txns, _ := s.BatchStats(); txns > txns0 {
				b.ReportMetric(float64(attempts-attempts0)/float64(txns-txns0), "attempts/txn")
			}
		})
	}
}

// BenchmarkSpannerBatchPaced offers increments of distinct leases at a
// fixed rate (open loop: each starts on schedule, whatever the previous
// ones are doing), as renewals arrive, and reports the transactions each
// update cost and the p50 latency:
//
//	go test -run '^$' -bench SpannerBatchPaced -benchtime 1000x ./emulator-tests/
func BenchmarkSpannerBatchPaced(b *testing.B) {
	for _, rate := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("Rate=%d", rate), func(b *testing.B) {
			s := spannerStore(b, spannerstore.WithLoop(backend.WithOneAtATime(true)), spannerstore.WithLoop(backend.WithReadFirst(spannerstore.FastPathNever)))
			loop := backend.NewLoop(s)
			prefix := spannerID("bench.paced.")
			n := b.N
			if rate == 1 {
				n = min(n, 10) // ten seconds
			}
			attempts0, txns0, _ := s.BatchStats()
			elapsed, lat := paced(b, n, rate, func(i int) {
				name := fmt.Sprintf("%s%05d", prefix, i%1000)
				if err := increment(b.Context(), loop, name); err != nil {
					b.Errorf("Update(%s): %v", name, err)
				}
			})
			b.ReportMetric(float64(n)/elapsed.Seconds(), "updates/s")
			b.ReportMetric(lat.pct(0.50), "p50-ms")
			if attempts, txns, _ := s.BatchStats(); attempts > attempts0 {
				b.ReportMetric(float64(txns-txns0)/float64(attempts-attempts0), "txn/update")
			}
		})
	}
}
