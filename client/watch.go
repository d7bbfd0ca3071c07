package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// watchIdle is how long a watch stream may stay silent (the service sends a
// heartbeat every 15s) before it is taken for dead and reconnected.
const watchIdle = 45 * time.Second

// WatchReconnectMax caps the delay between two reconnect attempts of a
// watch stream; the delay grows from Config.Backoff.Initial, doubling, with
// jitter (a random time in [d/2, d]), and a 429 or 503's Retry-After is
// waited at least.
const WatchReconnectMax = 10 * time.Second

// Stream is an open watch: of one lease (Watch) or of every lease under a
// prefix (WatchPrefix). Call Next until it fails, then Close. A Stream is
// for one goroutine.
//
// A dropped connection, one silent for 45s (three missed heartbeats), or a
// stream the service ends (a redeploy, its maximum stream lifetime) is
// reconnected for as long as the Stream's context lives, with capped
// jittered backoff (see WatchReconnectMax). Each reconnect sends the id of
// the last event read as Last-Event-ID, so the service replays what it
// keeps of the events since (docs/contract.md §10); then it sends the state
// of the watched lease or leases, so what it could not replay is summed up
// rather than lost. Only a refusal that retrying cannot change (400, 401,
// 403, 404) ends the Stream early.
//
// A lease's stream (Watch) can repeat an event across a reconnect: keep the
// newest per lease and drop what Newer says is not newer. A prefix stream
// (WatchPrefix) drops such repeats itself.
type Stream struct {
	c      *Client
	what   string // for errors: the lease name or "prefix P"
	path   string // URL path and query of the stream
	prefix bool
	ctx    context.Context
	stop   context.CancelFunc

	mu     sync.Mutex // guards cancel and body against Close
	cancel context.CancelFunc
	body   *bufio.Reader
	closer func() error
	idle   *time.Timer
	err    error // sticky: the stream is over

	lastID     string           // the id of the last event read: Last-Event-ID
	last       map[string]Event // prefix streams: the newest event per lease
	failures   int              // reconnect attempts since an event last arrived
	retryAfter time.Duration    // the last refusal's Retry-After
	reconnects int
}

// Watch opens a watch stream of the lease (GET /v1/leases/{name}:watch):
// an EventState with the lease now, then each change of holding. It fails
// like Get when the service cannot be reached (after Config.MaxAttempts) or
// refuses (ErrInvalid for a bad name); once open, the stream reconnects as
// Stream says. The stream ends when ctx is done or Close is called.
func (c *Client) Watch(ctx context.Context, name string) (*Stream, error) {
	return c.openStream(ctx, &Stream{what: fmt.Sprintf("%q", name), path: leasePath(name, ":watch")})
}

// WatchPrefix opens a stream of every lease whose name starts with prefix
// ("" for every lease the caller may read; GET /v1/leases:watch, see
// docs/contract.md §10): one EventState per existing lease, then each
// change of holding of any of them, in order per lease (by fencing token;
// repeats are dropped). A lease created later first appears with its
// acquired event. It fails and reconnects as Watch does; with
// authentication on, it carries only the leases the caller may read.
func (c *Client) WatchPrefix(ctx context.Context, prefix string) (*Stream, error) {
	return c.openStream(ctx, &Stream{what: fmt.Sprintf("prefix %q", prefix),
		path: "/v1/leases:watch?prefix=" + url.QueryEscape(prefix), prefix: true, last: map[string]Event{}})
}

func (c *Client) openStream(ctx context.Context, s *Stream) (*Stream, error) {
	s.c = c
	s.ctx, s.stop = context.WithCancel(ctx)
	if err := s.connect(false); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// Reconnects returns how many times the stream was opened again after its
// first connection.
func (s *Stream) Reconnects() int { return s.reconnects }

// connect opens the stream, retrying transient failures: at most
// Config.MaxAttempts times for the first connection, for as long as the
// context lives for a reconnect.
func (s *Stream) connect(again bool) error {
	b := Backoff{Initial: s.c.cfg.Backoff.Initial, Max: max(s.c.cfg.Backoff.Max, WatchReconnectMax), Multiplier: 2}
	var last error
	for n := 0; again || n < s.c.cfg.MaxAttempts; n++ {
		if n > 0 || again {
			d := max(b.Delay(min(s.failures, 30)), s.retryAfter)
			s.failures++
			t := time.NewTimer(d)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return s.fail(fmt.Errorf("%w (last attempt: %v)", context.Cause(s.ctx), last))
			case <-t.C:
			}
		}
		s.retryAfter = 0
		err := s.open()
		if err == nil {
			if again {
				s.reconnects++
			}
			return nil
		}
		if s.ctx.Err() != nil {
			return s.fail(context.Cause(s.ctx))
		}
		var e *Error
		if !errors.As(err, &e) || (e.kind != ErrUnavailable && !(again && e.kind == ErrInternal)) {
			return s.fail(err)
		}
		s.retryAfter = e.RetryAfter
		last = err
	}
	return s.fail(last)
}

func (s *Stream) fail(err error) error { return fmt.Errorf("leasesvc watch %s: %w", s.what, err) }

// open sends one watch request and keeps its body.
func (s *Stream) open() error {
	actx, cancel := context.WithCancel(s.ctx)
	req, err := http.NewRequestWithContext(actx, http.MethodGet, s.c.base.String()+s.path, nil)
	if err != nil {
		cancel()
		return &Error{Err: err, kind: ErrInvalid}
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", s.c.cfg.UserAgent)
	if s.lastID != "" {
		req.Header.Set("Last-Event-ID", s.lastID)
	}
	// The token and the headers must come within RequestTimeout; the body
	// may then last.
	hdr := time.AfterFunc(s.c.cfg.RequestTimeout, cancel)
	if err := s.c.authorize(actx, req, s.c.cfg.RequestTimeout); err != nil {
		hdr.Stop()
		cancel()
		return err
	}
	resp, err := s.c.hc.Do(req)
	hdr.Stop()
	if err != nil {
		cancel()
		return &Error{Err: err, kind: ErrUnavailable}
	}
	if resp.StatusCode != http.StatusOK {
		raw := make([]byte, 4096)
		n, _ := resp.Body.Read(raw)
		_ = resp.Body.Close()
		cancel()
		return problemError(resp, raw[:n])
	}
	s.mu.Lock()
	s.cancel, s.body, s.closer = cancel, bufio.NewReader(resp.Body), resp.Body.Close
	s.idle = time.AfterFunc(watchIdle, cancel)
	s.mu.Unlock()
	return nil
}

// drop closes the current connection.
func (s *Stream) drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		s.idle.Stop()
		s.cancel()
		_ = s.closer()
		s.cancel, s.body = nil, nil
	}
}

// Next returns the next event, waiting for it. It reconnects a dropped
// stream as the type's doc says, and fails when ctx is done, after Close,
// or when the service refuses the stream for good; after a failure every
// call fails the same.
func (s *Stream) Next() (Event, error) {
	for s.err == nil {
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		if body == nil {
			if err := s.connect(true); err != nil {
				s.err = err
			}
			continue
		}
		ev, id, err := s.read(body)
		if err == nil {
			s.failures = 0
			if id != "" {
				s.lastID = id
			}
			if ev.Type == "" || !s.news(ev) {
				continue
			}
			return ev, nil
		}
		s.drop()
		if s.ctx.Err() != nil {
			s.err = s.fail(context.Cause(s.ctx))
		}
		var pe *parseError
		if errors.As(err, &pe) {
			s.err = s.fail(err)
		}
	}
	return Event{}, s.err
}

// news reports whether ev is to be returned; on a prefix stream, only what
// is newer than the lease's last event is, and it becomes the last.
func (s *Stream) news(ev Event) bool {
	if !s.prefix {
		return true
	}
	name := ev.Lease.Name
	if last, ok := s.last[name]; ok && !Newer(last, ev) {
		return false
	}
	s.last[name] = ev
	return true
}

// parseError is an event the stream could not read: not retried.
type parseError struct{ err error }

func (e *parseError) Error() string { return e.err.Error() }
func (e *parseError) Unwrap() error { return e.err }

// read reads one event from the current connection, and its id. An event
// type this client does not know (history) comes back with an empty Type.
// An event (its lines up to the blank one that ends it) larger than
// MaxAnswerBytes fails, as a larger answer does, once that many bytes are
// read: nothing past the bound is buffered.
func (s *Stream) read(body *bufio.Reader) (Event, string, error) {
	var typ, id string
	var data strings.Builder
	size := 0 // bytes of the event so far
	for {
		line, err := s.line(body, MaxAnswerBytes-size)
		if err != nil {
			return Event{}, "", err
		}
		size += len(line)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			size = 0
			if typ == "" {
				data.Reset()
				continue
			}
			ev, err := decodeSSE(typ, data.String())
			return ev, id, err
		case strings.HasPrefix(line, ":"): // heartbeat
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimPrefix(line[len("id:"):], " ")
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(line[len("data:"):], " "))
		}
	}
}

// line reads one line of at most limit bytes, its end included. A longer
// one is a parseError (not retried: the service would send it again) once
// limit bytes are read, without reading on.
func (s *Stream) line(body *bufio.Reader, limit int) (string, error) {
	var long []byte // the line so far, once it outgrows body's buffer
	for {
		frag, err := body.ReadSlice('\n')
		if len(frag) > 0 {
			s.idle.Reset(watchIdle)
		}
		if len(long)+len(frag) > limit {
			return "", &parseError{&Error{Err: fmt.Errorf("event larger than %d bytes (client.MaxAnswerBytes)", MaxAnswerBytes), kind: ErrInternal}}
		}
		switch {
		case err == nil && long == nil:
			return string(frag), nil
		case err == nil:
			return string(append(long, frag...)), nil
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, frag...)
		default:
			return "", fmt.Errorf("stream: %w", err)
		}
	}
}

// decodeSSE turns one Server-Sent Event into an Event: "lease" (a lease's
// stream) and "snapshot" (a prefix stream) into EventState, the change
// types into theirs, any other type into an Event with no Type.
func decodeSSE(typ, data string) (Event, error) {
	switch EventType(typ) {
	case EventState, "snapshot":
		ev := Event{Type: EventState}
		if data != "null" {
			if err := json.Unmarshal([]byte(data), &ev.Lease); err != nil {
				return Event{}, &parseError{fmt.Errorf("%s event: %w", typ, err)}
			}
			ev.Time = ev.Lease.ServerTime
		}
		return ev, nil
	case EventAcquired, EventReleased, EventExpired, EventRevoked, EventDeleted:
	default:
		return Event{}, nil
	}
	ev, err := ParseEvent([]byte(data))
	if err != nil {
		return Event{}, &parseError{err}
	}
	return ev, nil
}

// Close ends the stream.
func (s *Stream) Close() error {
	s.stop()
	s.drop()
	return nil
}
