package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// bigMetadata is n bytes of metadata, of the characters an HTML-escaping
// encoder makes six times larger.
func bigMetadata(n int) []byte {
	return []byte(`{"blob":"` + strings.Repeat("<&>", (n-12)/3) + `"}`)
}

// bulkServer serves the API over a memory store holding n leases
// "bulk.0000"… of 32 KiB each (16 KiB of metadata and of checkpoint, the
// most of each), with limits lim; its log goes to the returned buffer and
// its changes to the returned hub.
func bulkServer(t *testing.T, n int, lim httpapi.Limits) (*httptest.Server, *hub.Hub, *e2e.SyncBuffer) {
	t.Helper()
	store := memory.New()
	events := hub.New()
	m, err := lease.NewManager(store, lease.Config{OnChange: events.Publish})
	if err != nil {
		t.Fatal(err)
	}
	md := bigMetadata(lease.MaxMetadataBytes)
	for i := range n {
		name := fmt.Sprintf("bulk.%04d", i)
		if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "h", TTL: time.Hour, Metadata: md}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "h", FencingToken: 1, Checkpoint: md}); err != nil {
			t.Fatal(err)
		}
	}
	logs := &e2e.SyncBuffer{}
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Events: events, Heartbeat: time.Hour, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.CloseStreams(); srv.Close() })
	return srv, events, logs
}

// stalledRequest sends a GET of path on a connection with a receive buffer
// of rcvbuf bytes (0: the system's default) and never reads the answer; the
// connection closes with the test.
//
// A small buffer stalls the server sooner, but only suits a client that
// never reads again: once the window has closed on a 4 KiB buffer, Linux
// sends what the server queued one zero-window probe at a time, a few KiB
// per persist timeout, so reading a megabyte the server's send buffer holds
// takes minutes.
func stalledRequest(t *testing.T, srv *httptest.Server, path string, rcvbuf int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if rcvbuf > 0 {
		_ = c.(*net.TCPConn).SetReadBuffer(rcvbuf)
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitLog waits until the log holds a line with every one of parts, and
// fails the test if none does within limit.
func waitLog(t *testing.T, logs *e2e.SyncBuffer, limit time.Duration, parts ...string) {
	t.Helper()
	if !logs.Await(limit, func(out string) bool { return hasLine(out, parts...) }) {
		t.Fatalf("no log line with %q within %v", parts, limit)
	}
}

// hasLine reports whether a line of out holds every one of parts.
func hasLine(out string, parts ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestAnswersAreNotHTMLEscaped: metadata comes back as it was stored, not
// with <, > and & escaped (six times the size), in a lease, a list page, a
// problem and a stream's events.
func TestAnswersAreNotHTMLEscaped(t *testing.T) {
	srv, _, _ := bulkServer(t, 1, httpapi.Limits{})
	c := e2e.Client{URL: srv.URL}
	const want = `<&><&>`
	for _, path := range []string{"/v1/leases/bulk.0000", "/v1/leases"} {
		if r := c.Get(t, path); r.Status != 200 || !strings.Contains(r.Raw, want) {
			t.Errorf("GET %s = %d %s, want %s unescaped", path, r.Status, r.Raw, want)
		}
	}
	if r := c.Post(t, "/v1/leases/bulk.0000:acquire", `{"holder":"other","ttlMs":1000}`); r.Status != 409 || !strings.Contains(r.Raw, want) {
		t.Errorf("lease_held = %d %s, want the lease's metadata unescaped", r.Status, r.Raw)
	}
	s := e2e.OpenStream(t, c, "/v1/leases:watch", "")
	defer s.Close()
	if ev := s.Next(t); ev.Event != "snapshot" || !strings.Contains(ev.Data, want) {
		t.Errorf("stream's first event %s %s, want a snapshot with %s unescaped", ev.Event, ev.Data, want)
	}
	c.Post(t, "/v1/leases/new:acquire", `{"holder":"a","ttlMs":60000,"metadata":{"m":"<b>&amp;</b>"}}`)
	if ev := s.Next(t); ev.Event != "acquired" || !strings.Contains(ev.Data, `<b>&amp;</b>`) {
		t.Errorf("acquired event %s %s, want its metadata unescaped", ev.Event, ev.Data)
	}
}

// TestResponseWriteDeadline: a client that asks for a large page and never
// reads it loses its connection after WriteTimeout, and the memory of the
// answer is freed (the handler returns); the server sets no WriteTimeout of
// its own.
func TestResponseWriteDeadline(t *testing.T) {
	srv, _, logs := bulkServer(t, 1000, httpapi.Limits{WriteTimeout: 200 * time.Millisecond, PageBytes: httpapi.MaxPageBytes})
	stalledRequest(t, srv, "/v1/leases?pageSize=1000", 4096)
	waitLog(t, logs, 20*time.Second, `"msg":"request"`, `"route":"/v1/leases"`)
}

// TestListPageBytes: a page ends early once its encoding would pass
// PageBytes, with a token that continues after its last lease; a lease
// larger than the bound still comes, alone; the pages list every lease once.
func TestListPageBytes(t *testing.T) {
	srv, _, _ := bulkServer(t, 12, httpapi.Limits{PageBytes: 110 << 10})
	c := e2e.Client{URL: srv.URL}
	var names []string
	tok := ""
	for pages := 0; ; pages++ {
		r := c.Get(t, "/v1/leases?pageSize=1000&pageToken="+tok)
		var page struct {
			Leases []struct {
				Name string `json:"name"`
			} `json:"leases"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := json.Unmarshal([]byte(r.Raw), &page); r.Status != 200 || err != nil {
			t.Fatalf("list = %d %v", r.Status, err)
		}
		if len(r.Raw) > 110<<10 || len(page.Leases) != 3 && page.NextPageToken != "" {
			t.Fatalf("page %d: %d bytes, %d leases (token %q), want at most 110 KiB: 3 leases of 33 KiB", pages, len(r.Raw), len(page.Leases), page.NextPageToken)
		}
		for _, l := range page.Leases {
			names = append(names, l.Name)
		}
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	if len(names) != 12 || names[0] != "bulk.0000" || names[11] != "bulk.0011" {
		t.Fatalf("the pages listed %v", names)
	}
	for i := 1; i < len(names); i++ {
		if names[i] <= names[i-1] {
			t.Fatalf("the pages listed %v: not once each in order", names)
		}
	}

	big, _, _ := bulkServer(t, 2, httpapi.Limits{PageBytes: 16 << 10})
	c = e2e.Client{URL: big.URL}
	r := c.Get(t, "/v1/leases")
	var page struct {
		Leases        []json.RawMessage `json:"leases"`
		NextPageToken string            `json:"nextPageToken"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &page); err != nil || len(page.Leases) != 1 || page.NextPageToken == "" {
		t.Fatalf("a lease larger than the bound: %d leases, token %q, %v; want it alone with a token", len(page.Leases), page.NextPageToken, err)
	}
}

// TestStalledStreamIsClosed: a prefix stream whose client never reads ends
// once a write has waited WriteTimeout, with its slot given back.
func TestStalledStreamIsClosed(t *testing.T) {
	srv, _, logs := bulkServer(t, 1000, httpapi.Limits{WriteTimeout: 200 * time.Millisecond, StreamBuffer: 64 << 10})
	stalledRequest(t, srv, "/v1/leases:watch", 4096)
	waitLog(t, logs, 20*time.Second, `"msg":"request"`, `"route":"/v1/leases:watch"`)
}

// TestStalledStreamLifetime: a stalled stream ends at the end of its
// lifetime, however long its write may wait.
func TestStalledStreamLifetime(t *testing.T) {
	srv, _, logs := bulkServer(t, 1000, httpapi.Limits{WriteTimeout: time.Hour, StreamLifetime: 300 * time.Millisecond})
	stalledRequest(t, srv, "/v1/leases:watch", 4096)
	waitLog(t, logs, 20*time.Second, `"msg":"request"`, `"route":"/v1/leases:watch"`)
}

// TestBigSnapshotAtClientPace: a snapshot far larger than StreamBuffer
// reaches a client that reads it: the stream's own backlog waits for room
// instead of overflowing.
func TestBigSnapshotAtClientPace(t *testing.T) {
	srv, _, _ := bulkServer(t, 200, httpapi.Limits{StreamBuffer: 64 << 10})
	s := e2e.OpenStream(t, e2e.Client{URL: srv.URL}, "/v1/leases:watch", "")
	defer s.Close()
	for i := range 200 {
		if ev := s.Next(t); ev.Event != "snapshot" {
			t.Fatalf("event %d is %s %.100s, want a snapshot", i, ev.Event, ev.Data)
		}
	}
}

// TestStreamOverflow: a client that falls more than StreamBuffer behind the
// changes is closed, and, once it reads again, its last event is overflow
// with the reason.
func TestStreamOverflow(t *testing.T) {
	srv, events, logs := bulkServer(t, 1, httpapi.Limits{StreamBuffer: 64 << 10})
	// The default receive buffer: this client reads again, the rest of
	// what the server queued (stalledRequest).
	c := stalledRequest(t, srv, "/v1/leases:watch", 0)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("watch = %v, %v", resp, err)
	}
	body := bufio.NewReader(resp.Body)
	for { // the snapshot, then live
		line, err := body.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == ": live\n" {
			break
		}
	}
	md := bigMetadata(lease.MaxMetadataBytes)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; !strings.Contains(logs.String(), "the client fell behind"); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d changes of 16 KiB in 20s and no overflow", i)
		}
		events.Publish(lease.Event{Type: lease.EventAcquired, Time: time.Now(),
			Lease: lease.Lease{Record: lease.Record{Name: fmt.Sprintf("ov.%06d", i), Holder: "h", FencingToken: 1, Metadata: md}}})
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // pace: a stream that lags drops changes instead of queueing them
		}
	}
	rest, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("reading the rest of an overflowed stream: %v", err)
	}
	frames := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	last := frames[len(frames)-1]
	if !strings.HasPrefix(last, "event: overflow\ndata: ") || !strings.Contains(last, `"reason":"the client fell more than 65536 bytes behind`) {
		t.Fatalf("last event %.300q, want overflow with its reason", last)
	}
}
