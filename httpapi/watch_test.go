package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
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

func TestWatchSeesAcquireReleaseAcquireInOrder(t *testing.T) {
	srv, _ := watchServer(t, true, time.Hour)
	c := e2e.Client{URL: srv.URL}
	name := e2e.UniqueName("watch")
	events := e2e.Watch(t, srv.URL, name)
	if ev := events.Next(t); ev.Event != "lease" || ev.Data != "null" {
		t.Fatalf("first event %+v, want lease null", ev)
	}
	c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"a","ttlMs":60000}`)
	c.Post(t, "/v1/leases/"+name+":renew", `{"holder":"a","fencingToken":1}`)
	c.Post(t, "/v1/leases/"+name+":release", `{"holder":"a","fencingToken":1}`)
	c.Post(t, "/v1/leases/"+name+":acquire", `{"holder":"b","ttlMs":60000}`)
	want := []string{name + "/1/acquired", name + "/1/released", name + "/2/acquired"}
	for _, id := range want {
		ev := events.Next(t)
		if ev.ID != id || !strings.HasSuffix(id, "/"+ev.Event) {
			t.Fatalf("event %+v, want id %s", ev, id)
		}
		var data struct {
			Type  string         `json:"type"`
			Lease map[string]any `json:"lease"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &data); err != nil || data.Type != ev.Event || data.Lease["name"] != name {
			t.Fatalf("event data %s: %v", ev.Data, err)
		}
	}
	// A new watcher starts from the state now.
	second := e2e.Watch(t, srv.URL, name)
	ev := second.Next(t)
	if ev.Event != "lease" || !strings.Contains(ev.Data, `"holder":"b"`) {
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
	events := e2e.Watch(t, srv.URL, name)
	if ev := events.Next(t); ev.Event != "lease" || !strings.Contains(ev.Data, `"held":true`) {
		t.Fatalf("first event %+v, want the held lease", ev)
	}
	if ev := events.NextAny(t); ev.Event != ":" {
		t.Fatalf("want a heartbeat comment first, got %+v", ev)
	}
	ev := events.Next(t)
	if ev.Event != "expired" || ev.ID != name+"/1/expired" {
		t.Fatalf("event %+v, want %s/1/expired", ev, name)
	}
}

func TestCloseStreamsEndsWatches(t *testing.T) {
	srv, h := watchServer(t, true, time.Hour)
	events := e2e.Watch(t, srv.URL, e2e.UniqueName("close"))
	events.Next(t)
	h.CloseStreams()
	if !events.Closed(5 * time.Second) {
		t.Fatal("stream still open 5s after CloseStreams")
	}
}
