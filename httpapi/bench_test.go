package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/backend/memory"
)

// BenchmarkRenew renews one holding through the handler (routing, decoding,
// the lease rules, the memory backend, encoding), with no network.
func BenchmarkRenew(b *testing.B) {
	h := newHandler(b, memory.New())
	serve(b, h, "/v1/leases/bench:acquire", `{"holder":"h","ttlMs":3600000}`)
	body := `{"holder":"h","fencingToken":1}`
	b.ReportAllocs()
	for b.Loop() {
		serve(b, h, "/v1/leases/bench:renew", body)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renews/s")
}

// BenchmarkAcquire acquires a fresh lease per iteration.
func BenchmarkAcquire(b *testing.B) {
	h := newHandler(b, memory.New())
	body := `{"holder":"h","ttlMs":30000}`
	paths := make([]string, 0, 1<<16)
	for i := range cap(paths) {
		paths = append(paths, fmt.Sprintf("/v1/leases/bench-%d:acquire", i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		serve(b, h, paths[i%len(paths)], body)
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
}

// BenchmarkRenewParallel renews many holdings from GOMAXPROCS goroutines.
func BenchmarkRenewParallel(b *testing.B) {
	h := newHandler(b, memory.New())
	const leases = 1024
	for i := range leases {
		serve(b, h, fmt.Sprintf("/v1/leases/p-%d:acquire", i), `{"holder":"h","ttlMs":3600000}`)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			serve(b, h, fmt.Sprintf("/v1/leases/p-%d:renew", i%leases), `{"holder":"h","fencingToken":1}`)
			i++
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renews/s")
}

func serve(b *testing.B, h http.Handler, path, body string) {
	req := apiRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatalf("POST %s = %d %s", path, w.Code, w.Body)
	}
}
