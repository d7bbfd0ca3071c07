package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
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

// sse is one Server-Sent Event as received.
type sse struct{ id, event, data string }

// watchServer serves the API with events wired from the Manager to the
// hub, as cmd/leasesvc does; withEvents false leaves watchers to their
// expiry timers.
func watchServer(t *testing.T, withEvents bool, heartbeat time.Duration) (*httptest.Server, *httpapi.Handler) {
	t.Helper()
	events := hub.New()
	cfg := lease.Config{}
	if withEvents {
		cfg.OnChange = events.Publish
	}
	m, err := lease.NewManager(memory.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, httpapi.Config{Events: events, Heartbeat: heartbeat, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, h
}

// openWatch starts a watch and returns a channel of its events; comments
// arrive as events named ":".
func openWatch(t *testing.T, url string) <-chan sse {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sse, 100)
	go func() {
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					out <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, ":"):
				out <- sse{event: ":"}
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.data = line[6:]
			}
		}
	}()
	return out
}

func next(t *testing.T, c <-chan sse, skipHeartbeats bool) sse {
	t.Helper()
	for {
		select {
		case ev, ok := <-c:
			if !ok {
				t.Fatal("stream ended")
			}
			if skipHeartbeats && ev.event == ":" {
				continue
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event in 5s")
		}
	}
}

func TestWatchSeesAcquireReleaseAcquireInOrder(t *testing.T) {
	srv, _ := watchServer(t, true, time.Hour)
	c := e2e.Client{URL: srv.URL}
	name := e2e.UniqueName("watch")
	events := openWatch(t, srv.URL+"/v1/leases/"+name+":watch")
	if ev := next(t, events, true); ev.event != "lease" || ev.data != "null" {
		t.Fatalf("first event %+v, want lease null", ev)
	}
	c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"a","ttlMs":60000}`)
	c.Post(t, "/v1/leases/"+name+":renew", `{"holder":"a","fencingToken":1}`)
	c.Post(t, "/v1/leases/"+name+":release", `{"holder":"a","fencingToken":1}`)
	c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"b","ttlMs":60000}`)
	want := []string{name + "/1/acquired", name + "/1/released", name + "/2/acquired"}
	for _, id := range want {
		ev := next(t, events, true)
		if ev.id != id || !strings.HasSuffix(id, "/"+ev.event) {
			t.Fatalf("event %+v, want id %s", ev, id)
		}
		var data struct {
			Type  string         `json:"type"`
			Lease map[string]any `json:"lease"`
		}
		if err := json.Unmarshal([]byte(ev.data), &data); err != nil || data.Type != ev.event || data.Lease["name"] != name {
			t.Fatalf("event data %s: %v", ev.data, err)
		}
	}
	// A new watcher starts from the state now.
	second := openWatch(t, srv.URL+"/v1/leases/"+name+":watch")
	ev := next(t, second, true)
	if ev.event != "lease" || !strings.Contains(ev.data, `"holder":"b"`) {
		t.Fatalf("second watcher's first event %+v, want the lease held by b", ev)
	}
}

// TestWatchWithoutEventsSeesExpiry: with no events wired, the expiry timer
// still reports the end of a holding nobody renewed.
func TestWatchWithoutEventsSeesExpiry(t *testing.T) {
	srv, _ := watchServer(t, false, 50*time.Millisecond)
	c := e2e.Client{URL: srv.URL}
	name := e2e.UniqueName("expiry")
	c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"a","ttlMs":1000}`)
	events := openWatch(t, srv.URL+"/v1/leases/"+name+":watch")
	if ev := next(t, events, true); ev.event != "lease" || !strings.Contains(ev.data, `"held":true`) {
		t.Fatalf("first event %+v, want the held lease", ev)
	}
	if ev := next(t, events, false); ev.event != ":" {
		t.Fatalf("want a heartbeat comment first, got %+v", ev)
	}
	ev := next(t, events, true)
	if ev.event != "expired" || ev.id != name+"/1/expired" {
		t.Fatalf("event %+v, want %s/1/expired", ev, name)
	}
}

func TestCloseStreamsEndsWatches(t *testing.T) {
	srv, h := watchServer(t, true, time.Hour)
	events := openWatch(t, srv.URL+"/v1/leases/"+e2e.UniqueName("close")+":watch")
	next(t, events, true)
	h.CloseStreams()
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("an event after CloseStreams")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5s after CloseStreams")
	}
}
