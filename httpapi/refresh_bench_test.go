package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// benchLeases is the prefix size the refresh benchmarks measure
// (docs/performance.md).
const benchLeases = 10000

// benchPrefix acquires benchLeases leases under "bench." on m, each held
// by its own holder with ttl.
func benchPrefix(b *testing.B, m *lease.Manager, ttl time.Duration) []lease.Lease {
	b.Helper()
	out := make([]lease.Lease, benchLeases)
	for i := range out {
		l, err := m.Acquire(b.Context(), lease.AcquireRequest{Name: fmt.Sprintf("bench.lease-%05d", i), Holder: fmt.Sprintf("holder-%05d", i), TTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = l
	}
	return out
}

// BenchmarkRefreshScan is one scan of a refresher over benchLeases leases
// under one prefix on the memory backend: the CPU an instance spends per
// interval per refreshed prefix (besides the backend's reads), when every
// lease was renewed since the last scan and when none was.
func BenchmarkRefreshScan(b *testing.B) {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ls := benchPrefix(b, m, time.Hour)
	rs := &refreshers{m: m, interval: time.Hour, timeout: time.Minute, stopCtx: b.Context(), by: map[string]*refresher{}}
	r := &refresher{rs: rs, prefix: "bench.", users: map[*refreshSub]struct{}{}, leases: map[string]*refreshed{}}
	if err := r.scan(b.Context()); err != nil {
		b.Fatal(err)
	}
	for _, renewed := range []bool{false, true} {
		b.Run(fmt.Sprintf("renewed=%v", renewed), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if renewed {
					b.StopTimer()
					for _, l := range ls {
						if _, err := m.Renew(b.Context(), lease.RenewRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken}); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
				}
				if err := r.scan(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/scan")
		})
	}
}

// BenchmarkRefreshStream measures a prefix stream over benchLeases leases
// whose holders renew every period (TTL 2 × period), through HTTP on
// loopback, for 10 s with refresh=true and 10 s without, the same renewals
// running: bytes per second on the stream, refresh events and leases in
// them per second, and the process's CPU (renewals, scans, the stream and
// its reader) in each, whose difference is what refresh costs. Run it once:
//
//	go test ./httpapi -run '^$' -bench RefreshStream -benchtime 1x
func BenchmarkRefreshStream(b *testing.B) {
	for _, period := range []time.Duration{time.Second, 5 * time.Second} {
		b.Run("renew="+period.String(), func(b *testing.B) {
			for b.Loop() {
				benchRefreshStream(b, period, 10*time.Second)
			}
		})
	}
}

func benchRefreshStream(b *testing.B, period, span time.Duration) {
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(m, Config{Logger: slog.New(slog.DiscardHandler), Events: events, Heartbeat: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.CloseStreams()
	ls := benchPrefix(b, m, 2*period)

	// The holders: each renews once per period, spread evenly.
	ctx, stop := context.WithCancel(b.Context())
	defer stop()
	var renewals atomic.Int64
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		const tick = 10 * time.Millisecond
		per := max(len(ls)*int(tick)/int(period), 1)
		t := time.NewTicker(tick)
		defer t.Stop()
		for i := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for range per {
				l := ls[i%len(ls)]
				if _, err := m.Renew(ctx, lease.RenewRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken}); err != nil && ctx.Err() == nil {
					b.Errorf("renew %s: %v", l.Name, err)
					return
				}
				i++
				renewals.Add(1)
			}
		}
	}()
	defer func() { stop(); <-renewDone }()

	for _, refresh := range []bool{false, true} {
		bytes, frames, entries, renewed, cpu, wall := measureStream(b, srv.URL+"/v1/leases:watch?prefix=bench.&refresh="+fmt.Sprint(refresh), span, &renewals)
		name := "plain"
		if refresh {
			name = "refresh"
		}
		b.ReportMetric(float64(bytes)/wall.Seconds(), name+"-B/s")
		b.ReportMetric(float64(cpu.Milliseconds())/wall.Seconds(), name+"-cpu-ms/s")
		b.ReportMetric(float64(renewed)/wall.Seconds(), name+"-renewals/s")
		if refresh {
			b.ReportMetric(float64(frames)/wall.Seconds(), "refresh-events/s")
			b.ReportMetric(float64(entries)/wall.Seconds(), "refreshed-leases/s")
		}
	}
}

// measureStream opens the stream, reads past its snapshots, then counts
// for span the bytes, the refresh events and the leases in them, and the
// process's CPU time, and how far renewals moved.
func measureStream(b *testing.B, url string, span time.Duration, renewals *atomic.Int64) (bytes, frames, entries, renewed int64, cpu, wall time.Duration) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	for { // the snapshots end with ": live"
		line, err := br.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if strings.HasPrefix(line, ": live") {
			break
		}
	}
	var n, f, e atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			line, err := br.ReadSlice('\n')
			n.Add(int64(len(line)))
			if strings.HasPrefix(string(line), "event: refresh") {
				f.Add(1)
			}
			if len(line) > 6 && string(line[:6]) == "data: " {
				e.Add(int64(strings.Count(string(line), `"name":`)))
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if err != io.EOF && ctx.Err() == nil {
					b.Error(err)
				}
				return
			}
		}
	}()
	n.Store(0)
	f.Store(0)
	e.Store(0)
	c0, t0, r0 := cpuTime(), time.Now(), renewals.Load()
	time.Sleep(span)
	cpu, wall, renewed = cpuTime()-c0, time.Since(t0), renewals.Load()-r0
	bytes, frames, entries = n.Load(), f.Load(), e.Load()
	cancel()
	<-done
	return bytes, frames, entries, renewed, cpu, wall
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
