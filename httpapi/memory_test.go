package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/lease"
)

// gatedWriter is a ResponseWriter whose client takes the first free bytes
// and then nothing until open is closed; a write deadline already passed
// (a stream's end) fails the write in progress, as on a connection.
type gatedWriter struct {
	header http.Header
	open   chan struct{}
	expire chan struct{}
	once   sync.Once

	mu   sync.Mutex
	free int
	out  strings.Builder
}

func newGatedWriter(free int) *gatedWriter {
	return &gatedWriter{header: http.Header{}, open: make(chan struct{}), expire: make(chan struct{}), free: free}
}

func (g *gatedWriter) Header() http.Header { return g.header }
func (g *gatedWriter) WriteHeader(int)     {}
func (g *gatedWriter) Flush()              {}

func (g *gatedWriter) Write(b []byte) (int, error) {
	g.mu.Lock()
	if g.free >= len(b) {
		g.free -= len(b)
		g.out.Write(b)
		g.mu.Unlock()
		return len(b), nil
	}
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-g.expire:
		return 0, context.DeadlineExceeded
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.out.Write(b)
	return len(b), nil
}

func (g *gatedWriter) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		g.once.Do(func() { close(g.expire) })
	}
	return nil
}

func (g *gatedWriter) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.out.String()
}

// budgetAPI is an api whose streams charge b, with a stream buffer larger
// than any test's queue, so that only the budget bounds it.
func budgetAPI(t *testing.T, b *membudget.Budget) *api {
	return &api{log: slog.New(slog.DiscardHandler), stopCtx: t.Context(),
		cfg: Config{Limits: Limits{StreamLifetime: time.Hour, WriteTimeout: time.Hour, StreamBuffer: 64 << 20, Memory: b}}}
}

// TestStreamQueueChargedToBudget: every byte a stream queues for a client
// that does not read is charged to its caller; the frame that passes the
// caller's share (or the instance's budget) is refused, the stream ends
// with an overflow event that says which, and everything is given back
// when the stream closes.
func TestStreamQueueChargedToBudget(t *testing.T) {
	for _, tc := range []struct {
		name         string
		total, share int64
		other        int64 // charged to another caller first
		want         string
	}{
		{"share", 1 << 20, 100 << 10, 0, "this caller's share of the instance's memory (102400 bytes)"},
		{"instance", 120 << 10, 100 << 10, 60 << 10, "this instance's memory budget (122880 bytes) is spent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, err := membudget.New(tc.total, tc.share)
				if err != nil {
					t.Fatal(err)
				}
				b.Charge("someone-else", tc.other)
				a := budgetAPI(t, b)
				w := newGatedWriter(0)
				r := httptest.NewRequest("GET", "/v1/leases/x:watch", nil)
				caller := a.callerKey(r)
				s := a.openStream(w, r, a.account(r))
				f := frame("", "lease", []byte(strings.Repeat("x", 10<<10)))
				n := 0
				for ; n < 100 && s.ok(); n++ {
					s.write(f)
					synctest.Wait()
					s.mu.Lock()
					queued := s.queued
					s.mu.Unlock()
					if got := b.Used(caller); got != int64(queued) {
						t.Fatalf("after %d frames: %d bytes charged, %d queued; want the queue charged", n+1, got, queued)
					}
				}
				if s.ok() || n == 100 {
					t.Fatalf("the stream took %d frames of 10 KiB; want it ended by the budget", n)
				}
				if used := b.Used(caller); used > tc.share || b.Stats().Used > tc.total {
					t.Fatalf("%d bytes charged to the caller, %d in all; want at most the share and the total", used, b.Stats().Used)
				}
				close(w.open)
				s.close()
				out := w.String()
				if !strings.Contains(out, "event: overflow") || !strings.Contains(out, tc.want) {
					t.Fatalf("stream ends with\n%.300s\nwant an overflow event saying %q", out[max(0, len(out)-300):], tc.want)
				}
				if got := b.Used(caller); got != 0 {
					t.Fatalf("%d bytes still charged after the stream closed", got)
				}
				b.Release("someone-else", tc.other)
				if st := b.Stats(); st.Used != 0 {
					t.Fatalf("budget %+v after everything closed; want nothing used", st)
				}
			})
		})
	}
}

// bigLeases is a Manager over a memory store holding n leases
// "big.0000"… of 32 KiB each (16 KiB of metadata and of checkpoint).
func bigLeases(t *testing.T, n, size int) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	md := []byte(`{"b":"` + strings.Repeat("x", size-8) + `"}`)
	for i := range n {
		name := fmt.Sprintf("big.%04d", i)
		if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "h", TTL: time.Hour, Metadata: md}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "h", FencingToken: 1, Checkpoint: md}); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// TestStuckPrefixStreamHoldsBounded: a prefix stream over leases of 32 KiB
// whose client stops reading during its snapshot holds, and is charged, at
// most its subscription to the events hub (64 events, ≈ 58 KiB), its
// snapshot queue (64 KiB) and one chunk (64 KiB), not a subscription of
// 1,024 events (≈ 0.9 MiB) and its whole buffer as before (issue 37: ≈ 4 MiB
// of RSS per stuck stream); when the client goes, everything is given back.
func TestStuckPrefixStreamHoldsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := bigLeases(t, 64, lease.MaxMetadataBytes)
		b, _ := membudget.New(1<<30, 1<<30)
		const buf = 128 << 10
		h, err := New(m, Config{Logger: slog.New(slog.DiscardHandler), Heartbeat: time.Hour,
			Limits: Limits{StreamBuffer: buf, StreamRefresh: StreamRefreshOff, Memory: b}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		r := httptest.NewRequestWithContext(ctx, "GET", "/v1/leases:watch", nil)
		r.Host = "localhost"
		w := newGatedWriter(64 << 10)
		done := make(chan struct{})
		go func() { defer close(done); h.ServeHTTP(w, r) }()
		synctest.Wait() // the writer is stuck, the loop waits for room
		used := b.Stats().Used
		chunk := int64(h.api.streamChunk())
		if sub := subscriptionCost(prefixStreamEvents); used < sub || used > sub+backlogBytes+chunk+maxLeaseBytes {
			t.Fatalf("a stuck prefix stream is charged %d bytes; want its subscription %d, at most with its snapshot's queue %d + a chunk %d + a frame", used, sub, backlogBytes, chunk)
		}
		t.Logf("stuck prefix stream charged %d bytes (snapshot queue %d, chunk %d, buffer %d)", used, backlogBytes, chunk, buf)
		cancel() // the client goes
		<-done
		if st := b.Stats(); st.Used != 0 {
			t.Fatalf("budget %+v after the stream ended; want nothing used", st)
		}
		h.CloseStreams()
	})
}

// memServer serves m with limits lim; done receives once per request
// after its handler has returned.
func memServer(t *testing.T, m *lease.Manager, lim Limits) (e2e.Client, <-chan struct{}) {
	t.Helper()
	h, err := New(m, Config{Logger: slog.New(slog.DiscardHandler), Heartbeat: time.Hour, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { h.CloseStreams(); srv.Close() })
	return e2e.Client{URL: srv.URL}, done
}

// TestMemoryRefusesRequests: a list page, a prefix stream and a request
// body that the budget cannot hold are refused before anything happens,
// 429 when the caller's share is spent and 503 when the instance's budget
// is, with Retry-After and a detail naming the setting; what a refused
// or answered request charged is given back.
func TestMemoryRefusesRequests(t *testing.T) {
	m := bigLeases(t, 4, lease.MaxMetadataBytes)
	body := `{"holder":"a","ttlMs":60000,"metadata":{"m":"` + strings.Repeat("y", 8<<10) + `"}}`
	for _, tc := range []struct {
		name         string
		total, share int64
		other        int64 // charged to another caller
		status       int
		code, detail string
	}{
		{"share", 1 << 30, 4 << 10, 0, 429, "resource_exhausted", "LEASESVC_MEMORY_PER_CALLER"},
		{"instance", 1 << 20, 1 << 20, 1<<20 - 4<<10, 503, "unavailable", "LEASESVC_MEMORY_BUDGET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := membudget.New(tc.total, tc.share)
			b.Charge("another", tc.other)
			c, done := memServer(t, m, Limits{Memory: b})
			for _, req := range []struct{ method, path, body string }{
				{"GET", "/v1/leases", ""},
				{"GET", "/v1/leases:watch", ""},
				{"GET", "/v1/leases/big.0001:watch", ""},
				{"POST", "/v1/leases/fresh:acquire", body},
			} {
				var r e2e.Response
				if req.method == "GET" {
					r = c.Get(t, req.path)
				} else {
					r = c.Post(t, req.path, req.body)
				}
				<-done
				if r.Status != tc.status || r.Code() != tc.code || r.Header.Get("Retry-After") == "" ||
					!strings.Contains(r.Raw, tc.detail) || r.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s = %d %v %s; want %d %s with Retry-After naming %s", req.method, req.path, r.Status, r.Header, r.Raw, tc.status, tc.code, tc.detail)
				}
				if st := b.Stats(); st.Used != tc.other {
					t.Errorf("%s %s left %+v charged; want only the other caller's %d", req.method, req.path, st, tc.other)
				}
			}
			if _, err := m.Get(t.Context(), "fresh"); err == nil {
				t.Error("the refused acquire took the lease")
			}
		})
	}
}

// TestMemoryDefaultsServeLargePrefix: at the defaults (112 MiB, 28 MiB a
// caller) a prefix stream of 10,000 leases and list pages of them are
// served whole, nothing refused, and nothing stays charged.
func TestMemoryDefaultsServeLargePrefix(t *testing.T) {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	md := []byte(`{"team":"payments","owner":"agent-7"}`)
	for i := range n {
		if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: fmt.Sprintf("many.%05d", i), Holder: "h", TTL: time.Hour, Metadata: md}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := membudget.New(112<<20, 28<<20)
	c, done := memServer(t, m, Limits{Memory: b})
	s := e2e.WatchPrefix(t, c, "many.", "")
	for i := range n {
		if ev := s.Next(t); ev.Event != "snapshot" {
			t.Fatalf("event %d: %s %s; want a snapshot of each of %d leases", i, ev.Event, ev.Data, n)
		}
	}
	s.Close()
	<-done
	if r := c.Get(t, "/v1/leases?prefix=many.&pageSize=1000"); r.Status != 200 || len(r.Body["leases"].([]any)) != 1000 {
		t.Fatalf("list page = %d %.200s; want 1000 leases", r.Status, r.Raw)
	}
	<-done
	if st := b.Stats(); st.Used != 0 || st.Refused != 0 {
		t.Fatalf("budget %+v; want nothing refused, nothing left charged", st)
	}
}

// TestPrefixStreamMarksCharged: a prefix stream whose record of the leases
// it sent outgrows the caller's share ends with an overflow event that
// says so, having sent no more than fitted; nothing stays charged.
func TestPrefixStreamMarksCharged(t *testing.T) {
	m := bigLeases(t, 200, 64)
	share := subscriptionCost(prefixStreamEvents) + 64<<10 + 100*markCost("big.0000") // room for ≈ 100 marks, then the queue
	b, _ := membudget.New(1<<30, share)
	c, done := memServer(t, m, Limits{Memory: b})
	s := e2e.WatchPrefix(t, c, "big.", "")
	n := 0
	for {
		ev := s.NextAny(t)
		if ev.Event == "snapshot" {
			n++
			continue
		}
		if ev.Event != "overflow" || !strings.Contains(ev.Data, "this caller's share") {
			t.Fatalf("after %d snapshots: %s %s; want an overflow event naming the caller's share", n, ev.Event, ev.Data)
		}
		break
	}
	if n >= 100 { // what was queued when the budget refused is dropped, so maybe none came
		t.Fatalf("%d snapshots before the overflow; want fewer than the 100 marks the share holds", n)
	}
	s.Close()
	<-done
	if st := b.Stats(); st.Used != 0 || st.Refused == 0 {
		t.Fatalf("budget %+v after the stream ended; want a refusal and nothing used", st)
	}
}
