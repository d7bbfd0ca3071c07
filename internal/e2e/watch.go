package e2e

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// SSE is one Server-Sent Event of a watch stream; a comment (heartbeat)
// has Event ":".
type SSE struct {
	// ID is the event's id field (the ce-id of a change).
	ID string
	// Event is the event type: lease, acquired, released, expired, or ":".
	Event string
	// Data is the event's data line.
	Data string
}

// Stream is an open watch.
type Stream struct {
	c <-chan SSE
}

// Watch opens GET /v1/leases/{name}:watch; the stream closes when the test
// ends.
func Watch(t testing.TB, baseURL, name string) *Stream {
	t.Helper()
	return WatchWith(t, Client{URL: baseURL}, name)
}

// WatchWith opens the watch stream with c, which may carry credentials.
func WatchWith(t testing.TB, c Client, name string) *Stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/v1/leases/"+name+":watch", nil)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch %s: %v", name, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("watch %s = %d %s", name, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan SSE, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		var cur SSE
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.Event != "" {
					out <- cur
				}
				cur = SSE{}
			case strings.HasPrefix(line, ":"):
				out <- SSE{Event: ":"}
			case strings.HasPrefix(line, "id: "):
				cur.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.Data = line[6:]
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &Stream{c: out}
}

// Next returns the next event that is not a heartbeat, failing the test
// after 10 s.
func (s *Stream) Next(t testing.TB) SSE {
	t.Helper()
	for {
		ev := s.NextAny(t)
		if ev.Event != ":" {
			return ev
		}
	}
}

// NextAny returns the next event or heartbeat, failing the test after 10 s
// or when the stream ends.
func (s *Stream) NextAny(t testing.TB) SSE {
	t.Helper()
	select {
	case ev, ok := <-s.c:
		if !ok {
			t.Fatal("watch stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event in 10s")
	}
	return SSE{}
}

// Closed reports whether the stream ends within d.
func (s *Stream) Closed(d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-s.c:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
