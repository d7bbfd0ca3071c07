package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// watchIdle is how long a watch stream may stay silent (the service sends a
// heartbeat every 15s) before it is taken for dead and reconnected.
const watchIdle = 45 * time.Second

// Stream is an open watch of one lease (GET /v1/leases/{name}:watch): the
// lease now, then each change of holding. Call Next until it fails, then
// Close. A Stream is for one goroutine.
//
// A dropped connection, or one silent for 45s (three missed heartbeats), is
// reconnected with backoff; the first event after a reconnect is an
// EventState with the lease as it is then, so changes missed meanwhile are
// summed up rather than lost. Events can repeat across a reconnect: keep
// the newest per lease and drop what Newer says is not newer.
type Stream struct {
	c    *Client
	name string
	ctx  context.Context
	stop context.CancelFunc

	mu     sync.Mutex // guards cancel and body against Close
	cancel context.CancelFunc
	body   *bufio.Reader
	closer func() error
	idle   *time.Timer
	err    error // sticky: the stream is over
}

// Watch opens a watch stream of the lease. It fails like Get when the
// service cannot be reached (after retries) or refuses (ErrInvalid for a
// bad name). The stream ends when ctx is done or Close is called.
func (c *Client) Watch(ctx context.Context, name string) (*Stream, error) {
	sctx, stop := context.WithCancel(ctx)
	s := &Stream{c: c, name: name, ctx: sctx, stop: stop}
	if err := s.connect(); err != nil {
		stop()
		return nil, err
	}
	return s, nil
}

// connect opens the stream, retrying transient failures like any call.
func (s *Stream) connect() error {
	var last error
	for n := 0; n < s.c.cfg.MaxAttempts; n++ {
		if n > 0 {
			t := time.NewTimer(s.c.cfg.Backoff.Delay(n - 1))
			select {
			case <-s.ctx.Done():
				t.Stop()
				return fmt.Errorf("leasesvc watch %q: %w (last attempt: %v)", s.name, context.Cause(s.ctx), last)
			case <-t.C:
			}
		}
		err := s.open()
		if err == nil {
			return nil
		}
		if s.ctx.Err() != nil {
			return fmt.Errorf("leasesvc watch %q: %w", s.name, context.Cause(s.ctx))
		}
		var e *Error
		if !errors.As(err, &e) || e.kind != ErrUnavailable {
			return fmt.Errorf("leasesvc watch %q: %w", s.name, err)
		}
		last = err
	}
	return fmt.Errorf("leasesvc watch %q: %w", s.name, last)
}

// open sends one watch request and keeps its body.
func (s *Stream) open() error {
	actx, cancel := context.WithCancel(s.ctx)
	req, err := http.NewRequestWithContext(actx, http.MethodGet, s.c.base.String()+leasePath(s.name, ":watch"), nil)
	if err != nil {
		cancel()
		return &Error{Err: err, kind: ErrInvalid}
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", s.c.cfg.UserAgent)
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
// or when reconnecting fails; after a failure every call fails the same.
func (s *Stream) Next() (Event, error) {
	for s.err == nil {
		s.mu.Lock()
		body := s.body
		s.mu.Unlock()
		if body == nil {
			if err := s.connect(); err != nil {
				s.err = err
			}
			continue
		}
		ev, err := s.read(body)
		if err == nil {
			return ev, nil
		}
		s.drop()
		if s.ctx.Err() != nil {
			s.err = fmt.Errorf("leasesvc watch %q: %w", s.name, context.Cause(s.ctx))
		}
		var pe *parseError
		if errors.As(err, &pe) {
			s.err = fmt.Errorf("leasesvc watch %q: %w", s.name, err)
		}
	}
	return Event{}, s.err
}

// parseError is an event the stream could not read: not retried.
type parseError struct{ err error }

func (e *parseError) Error() string { return e.err.Error() }
func (e *parseError) Unwrap() error { return e.err }

// read reads one event from the current connection.
func (s *Stream) read(body *bufio.Reader) (Event, error) {
	var typ, data string
	for {
		line, err := body.ReadString('\n')
		if err != nil {
			return Event{}, fmt.Errorf("stream: %w", err)
		}
		s.idle.Reset(watchIdle)
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if typ == "" {
				continue
			}
			return decodeSSE(typ, data)
		case strings.HasPrefix(line, ":"): // heartbeat
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(line[len("event:"):])
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(line[len("data:"):], " ")
		}
	}
}

// decodeSSE turns one Server-Sent Event into an Event.
func decodeSSE(typ, data string) (Event, error) {
	if typ == string(EventState) {
		ev := Event{Type: EventState}
		if data != "null" {
			if err := json.Unmarshal([]byte(data), &ev.Lease); err != nil {
				return Event{}, &parseError{fmt.Errorf("lease event: %w", err)}
			}
			ev.Time = ev.Lease.ServerTime
		}
		return ev, nil
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
