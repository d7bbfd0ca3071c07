package e2e

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
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
	c      <-chan SSE
	cancel func()
}

// Close ends the stream (it also ends when the test does).
func (s *Stream) Close() { s.cancel() }

// Watch opens GET /v1/leases/{name}:watch; the stream closes when the test
// ends.
func Watch(t testing.TB, baseURL, name string) *Stream {
	t.Helper()
	return WatchWith(t, Client{URL: baseURL}, name)
}

// WatchWith opens the watch stream with c, which may carry credentials.
func WatchWith(t testing.TB, c Client, name string) *Stream {
	t.Helper()
	return OpenStream(t, c, "/v1/leases/"+name+":watch", "")
}

// WatchPrefix opens the prefix stream GET /v1/leases:watch?prefix=P, with
// Last-Event-ID lastID unless it is empty.
func WatchPrefix(t testing.TB, c Client, prefix, lastID string) *Stream {
	t.Helper()
	return OpenStream(t, c, "/v1/leases:watch?prefix="+url.QueryEscape(prefix), lastID)
}

// OpenStream opens an event stream at path (with its query), sending
// Last-Event-ID lastID unless it is empty; the stream closes when the test
// ends or on Close.
func OpenStream(t testing.TB, c Client, path, lastID string) *Stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+path, nil)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("watch %s = %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan SSE, 1000)
	done := make(chan struct{})
	send := func(ev SSE) {
		select {
		case out <- ev:
		case <-ctx.Done():
		}
	}
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
					send(cur)
				}
				cur = SSE{}
			case strings.HasPrefix(line, ":"):
				send(SSE{Event: ":"})
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
	return &Stream{c: out, cancel: cancel}
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
