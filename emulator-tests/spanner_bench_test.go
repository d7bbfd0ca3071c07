package emulatortests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/leasesvc/leasesvc/backend"
	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/lease"
)

// The Spanner benchmarks time acquire and renew three ways, interleaved in
// every iteration so that all three see the same emulator (whose strong
// reads slow down as it accumulates commits):
//
//   - direct: one read-write transaction through the client library doing
//     the same work by hand (read the row with CURRENT_TIMESTAMP(), decide,
//     InsertOrUpdate), the floor;
//   - store: lease.Manager over the Store in this process, no HTTP;
//   - service: HTTP to the leasesvc binary over the same emulator.
//
// Each reports p50/p99 in milliseconds and service p50 ÷ direct p50; and,
// to tell the service layer's share, the p50 of GET /healthz (the HTTP hop
// alone) and of the same operation on a leasesvc over the memory backend
// (memsvc: HTTP, JSON, logging and the lease rules, no database):
//
//	go test -run '^$' -bench Spanner -benchtime 300x ./emulator-tests/

// BenchmarkSpannerAcquire acquires a new lease per iteration.
func BenchmarkSpannerAcquire(b *testing.B) { spannerBench(b, false) }

// BenchmarkSpannerRenew renews one holding per iteration.
func BenchmarkSpannerRenew(b *testing.B) { spannerBench(b, true) }

func spannerBench(b *testing.B, renew bool) {
	for _, fast := range []spannerstore.FastPath{spannerstore.FastPathAdaptive, spannerstore.FastPathAlways, spannerstore.FastPathNever} {
		b.Run("FastPath="+fast.String(), func(b *testing.B) {
			db, client := spannerSetup(b)
			svc := e2e.StartService(b, spannerServiceEnv(db, "LEASESVC_SPANNER_FAST_PATH", fast.String()))
			mem := e2e.StartService(b, map[string]string{"LEASESVC_BACKEND": "memory"})
			store, err := spannerstore.New(client, spannerstore.WithLoop(backend.WithReadFirst(fast)), spannerstore.WithLoop(backend.WithOneAtATime(true)))
			if err != nil {
				b.Fatal(err)
			}
			m, err := lease.NewManager(store, lease.Config{})
			if err != nil {
				b.Fatal(err)
			}
			hc := &http.Client{Timeout: time.Minute}
			ctx := b.Context()
			prefix := spannerID("bench.")
			const holder, ttl = "bench", 60 * time.Second

			var direct, lib, service, healthz, memory spannerLatencies
			i := 0
			name := func(kind string) string {
				if renew {
					return prefix + kind
				}
				return fmt.Sprintf("%s%s.%d", prefix, kind, i)
			}
			if renew { // one holding each, renewed in the loop
				if err := spannerDirectAcquire(ctx, client, name("direct"), holder, ttl); err != nil {
					b.Fatal(err)
				}
				if _, err := m.Acquire(ctx, lease.AcquireRequest{Name: name("store"), Holder: holder, TTL: ttl}); err != nil {
					b.Fatal(err)
				}
				for _, url := range []string{svc.URL, mem.URL} {
					if err := spannerServicePost(ctx, hc, url, name("service"), "acquire", `{"holder":"bench","ttlMs":60000}`); err != nil {
						b.Fatal(err)
					}
				}
			}
			for b.Loop() {
				i++
				healthz.time(b, func() error { return spannerServiceGet(ctx, hc, svc.URL+"/healthz") })
				if renew {
					direct.time(b, func() error { return spannerDirectRenew(ctx, client, name("direct"), holder, 1, ttl) })
					lib.time(b, func() error {
						_, err := m.Renew(ctx, lease.RenewRequest{Name: name("store"), Holder: holder, FencingToken: 1})
						return err
					})
					service.time(b, func() error {
						return spannerServicePost(ctx, hc, svc.URL, name("service"), "renew", `{"holder":"bench","fencingToken":1}`)
					})
					memory.time(b, func() error {
						return spannerServicePost(ctx, hc, mem.URL, name("service"), "renew", `{"holder":"bench","fencingToken":1}`)
					})
					continue
				}
				direct.time(b, func() error { return spannerDirectAcquire(ctx, client, name("direct"), holder, ttl) })
				lib.time(b, func() error {
					_, err := m.Acquire(ctx, lease.AcquireRequest{Name: name("store"), Holder: holder, TTL: ttl})
					return err
				})
				service.time(b, func() error {
					return spannerServicePost(ctx, hc, svc.URL, name("service"), "acquire", `{"holder":"bench","ttlMs":60000}`)
				})
				memory.time(b, func() error {
					return spannerServicePost(ctx, hc, mem.URL, name("service"), "acquire", `{"holder":"bench","ttlMs":60000}`)
				})
			}
			b.StopTimer()
			direct.report(b, "direct")
			lib.report(b, "store")
			service.report(b, "service")
			b.ReportMetric(healthz.pct(0.50), "healthz-p50-ms")
			b.ReportMetric(memory.pct(0.50), "memsvc-p50-ms")
			b.ReportMetric(service.pct(0.50)/direct.pct(0.50), "service/direct-p50")
			for _, s := range []*e2e.Service{svc, mem} {
				if _, err := s.Stop(); err != nil {
					b.Fatalf("stop leasesvc: %v", err)
				}
			}
		})
	}
}

// spannerLatencies collects the latencies of one kind of operation.
type spannerLatencies []time.Duration

// time runs op once and records how long it took; an error fails b.
func (l *spannerLatencies) time(b *testing.B, op func() error) {
	start := time.Now()
	if err := op(); err != nil {
		b.Fatal(err)
	}
	*l = append(*l, time.Since(start))
}

// pct returns the p-th quantile (0 < p ≤ 1) in milliseconds.
func (l spannerLatencies) pct(p float64) float64 {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := min(int(p*float64(len(s))), len(s)-1)
	return float64(s[i]) / float64(time.Millisecond)
}

func (l spannerLatencies) report(b *testing.B, label string) {
	b.ReportMetric(l.pct(0.50), label+"-p50-ms")
	b.ReportMetric(l.pct(0.99), label+"-p99-ms")
}

// spannerServicePost sends POST /v1/leases/{name}:{verb} and wants 200.
func spannerServicePost(ctx context.Context, hc *http.Client, base, name, verb, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/leases/"+name+":"+verb, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", verb, name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", verb, name, resp.StatusCode, raw)
	}
	return nil
}

// spannerServiceGet sends GET url and wants 200: the HTTP round trip alone.
func spannerServiceGet(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("GET %s: read body: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return nil
}

// spannerDirectReadSQL is the read the Store makes, written out here so the
// direct benchmark does not depend on the package's internals.
const spannerDirectReadSQL = `SELECT CURRENT_TIMESTAMP() AS Now,
  ARRAY(SELECT AS STRUCT Holder, FencingToken, AcquireTime, ExpireTime, Transitions FROM Leases WHERE Name = @name) AS Lease`

// spannerDirectLease is what the direct benchmark reads of a lease.
type spannerDirectLease struct {
	Holder       string
	FencingToken int64
	AcquireTime  time.Time
	ExpireTime   time.Time
	Transitions  int64
}

// spannerDirectRead returns the server time and the lease, or nil.
func spannerDirectRead(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (time.Time, *spannerDirectLease, error) {
	it := tx.Query(ctx, spanner.Statement{SQL: spannerDirectReadSQL, Params: map[string]any{"name": name}})
	defer it.Stop()
	row, err := it.Next()
	if err != nil {
		return time.Time{}, nil, err
	}
	var (
		now  time.Time
		rows []*spannerDirectLease
	)
	if err := row.Columns(&now, &rows); err != nil || len(rows) == 0 {
		return now, nil, err
	}
	return now, rows[0], nil
}

func spannerDirectWrite(tx *spanner.ReadWriteTransaction, rec lease.Record) error {
	return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate(spannerstore.Table,
		[]string{"Name", "Holder", "FencingToken", "TtlMs", "AcquireTime", "RenewTime", "ExpireTime", "Transitions", "Metadata", "UpdateTime"},
		[]any{rec.Name, rec.Holder, rec.FencingToken, rec.TTL.Milliseconds(), rec.AcquireTime, rec.RenewTime, rec.ExpireTime,
			rec.Transitions, spanner.NullString{}, spanner.CommitTimestamp})})
}

// spannerDirectAcquire acquires name in one read-write transaction.
func spannerDirectAcquire(ctx context.Context, c *spanner.Client, name, holder string, ttl time.Duration) error {
	_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		now, cur, err := spannerDirectRead(ctx, tx, name)
		if err != nil {
			return err
		}
		now = now.Truncate(time.Microsecond)
		rec := lease.Record{Name: name, Holder: holder, FencingToken: 1, TTL: ttl,
			AcquireTime: now, RenewTime: now, ExpireTime: now.Add(ttl), Transitions: 1}
		switch {
		case cur == nil:
		case !now.Before(cur.ExpireTime):
			rec.FencingToken, rec.Transitions = cur.FencingToken+1, cur.Transitions+1
		case cur.Holder != holder:
			return lease.ErrHeld
		default:
			rec.FencingToken, rec.Transitions, rec.AcquireTime = cur.FencingToken, cur.Transitions, cur.AcquireTime
		}
		return spannerDirectWrite(tx, rec)
	})
	return err
}

// spannerDirectRenew renews the holding of name in one read-write transaction.
func spannerDirectRenew(ctx context.Context, c *spanner.Client, name, holder string, token int64, ttl time.Duration) error {
	_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		now, cur, err := spannerDirectRead(ctx, tx, name)
		if err != nil {
			return err
		}
		now = now.Truncate(time.Microsecond)
		if cur == nil || !now.Before(cur.ExpireTime) || cur.Holder != holder || cur.FencingToken != token {
			return errors.New("direct renew: lease lost")
		}
		return spannerDirectWrite(tx, lease.Record{Name: name, Holder: holder, FencingToken: token, TTL: ttl,
			AcquireTime: cur.AcquireTime, RenewTime: now, ExpireTime: now.Add(ttl), Transitions: cur.Transitions})
	})
	return err
}
