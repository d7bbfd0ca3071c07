package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

// benchSessionService runs the real lease API with sessions (httpapi and
// session.Registry over lease.Manager over the memory backend) in process
// until the end of the benchmark.
func benchSessionService(b *testing.B) *httptest.Server {
	b.Helper()
	events := hub.New()
	m, err := lease.NewManager(memory.New(), lease.Config{OnChange: events.Publish})
	if err != nil {
		b.Fatal(err)
	}
	// The heartbeats go flat out: far above a session's default message
	// rate, which would end the socket.
	reg, err := session.New(session.Manager{M: m}, session.Config{Events: events, Logger: slog.New(slog.DiscardHandler),
		MessageRate: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.DiscardHandler), Events: events, Sessions: reg})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(func() {
		h.CloseStreams()
		srv.CloseClientConnections()
		srv.Close()
		reg.Stop()
	})
	return srv
}

// awaitAck waits until the session counted the ack of a heartbeat sent at
// or after since: its deadline then stands on that heartbeat.
func (s *Session) awaitAck(ctx context.Context, since time.Time) error {
	for {
		s.mu.Lock()
		done, ch := !s.ackedSent.Before(since), s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// BenchmarkSessionHeartbeat measures one heartbeat round trip of a
// Session holding one lease, against the real service in process: the
// heartbeat's encoding and write, the service's ack, and the agent's read
// and decision on it (the deadline moves). The window is the longest, so
// that the Session's own heartbeats (every 15s) hardly ever run
// alongside; the ns/op and allocs/op are those of both ends of the
// socket (use -cpuprofile to tell the agent's share).
func BenchmarkSessionHeartbeat(b *testing.B) {
	srv := benchSessionService(b)
	// The agent's goroutines (the caller's, the Session's reader and
	// supervisor) carry the label side=agent in a CPU profile; the
	// service's do not: go tool pprof -tagfocus side=agent.
	pprof.Do(context.Background(), pprof.Labels("side", "agent"), func(ctx context.Context) {
		benchHeartbeat(ctx, b, srv.URL)
	})
}

// benchHeartbeat is BenchmarkSessionHeartbeat against the service at url.
func benchHeartbeat(ctx context.Context, b *testing.B, url string) {
	c, err := New(url, Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := c.OpenSession(ctx, SessionConfig{Window: MaxSessionWindow})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close(context.Background()) }()
	l, err := s.Acquire(ctx, "bench.heartbeat", AcquireRequest{Holder: "agent-1"})
	if err != nil {
		b.Fatal(err)
	}
	if !l.Held {
		b.Fatalf("acquire answered %+v, want held", l)
	}
	beat := func() {
		since := s.cfg.Clock.Now()
		s.beat()
		if err := s.awaitAck(ctx, since); err != nil {
			b.Fatalf("no ack of the heartbeat: %v", err)
		}
	}
	beat() // the holding is vouched for from here on (A4)
	sock := s.current()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		beat()
	}
	b.StopTimer()
	// Both ends' CPU, user and system (the loopback's kernel work too):
	// steadier than ns/op, which is the round trip's latency.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	if s.current() != sock {
		b.Fatal("the session changed sockets during the heartbeats: the run measured a reconnection")
	}
	if h := s.holding(l.Name, l.FencingToken); h == nil || s.holdingDeadline(h).Before(time.Now()) {
		b.Fatal("the holding is not led after the heartbeats")
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestHeartbeatFastForms: the heartbeat encoded by hand is what the
// general encoding gives, and the acks recognised without json.Unmarshal
// are exactly the service's encoding, read as the general decoding reads
// them; any other form is left to the general path.
func TestHeartbeatFastForms(t *testing.T) {
	for _, id := range []int64{1, 9, 10, 12345, 1<<53 - 1, 999_999_999_999_999_999} {
		want, err := json.Marshal(outMsg{Type: "heartbeat", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendHeartbeat(nil, id); string(got) != string(want) {
			t.Errorf("heartbeat %d encoded %s, want %s", id, got, want)
		}
		ack, err := json.Marshal(map[string]any{"type": "ack", "re": id}) // as the service sends it
		if err != nil {
			t.Fatal(err)
		}
		re, ok := ackID(ack)
		var m inMsg
		if err := json.Unmarshal(ack, &m); err != nil || m.Type != "ack" || m.Re == nil || *m.Re != id {
			t.Fatalf("the general decoding of %s: %+v, %v", ack, m, err)
		}
		if !ok || re != id {
			t.Errorf("ackID(%s) = %d, %v; want %d, true", ack, re, ok, id)
		}
	}
	for _, other := range []string{
		``, `{"re":,"type":"ack"}`, `{"re":0,"type":"ack"}`, `{"re":07,"type":"ack"}`, `{"re":-7,"type":"ack"}`,
		`{"re":7.0,"type":"ack"}`, `{"re":1e3,"type":"ack"}`, `{"re": 7,"type":"ack"}`, `{"re":7, "type":"ack"}`,
		`{"type":"ack","re":7}`, `{"re":7,"type":"ack","x":1}`, `{"re":7,"type":"acks"}`, `{"re":"7","type":"ack"}`,
		`{"re":1000000000000000000,"type":"ack"}`, `{"re":7,"type":"error"}`, `{"re":7,"type":"ack"} `,
	} {
		if re, ok := ackID([]byte(other)); ok {
			t.Errorf("ackID(%s) = %d, true; want it left to the general path", other, re)
		}
	}
}
