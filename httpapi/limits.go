package httpapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// slots counts what callers hold open (streams, waiting acquires) against a
// per-caller and a per-instance cap.
type slots struct {
	perCaller, total int

	mu    sync.Mutex
	n     int
	inUse map[string]int
}

func newSlots(perCaller, total int) *slots {
	return &slots{perCaller: perCaller, total: total, inUse: map[string]int{}}
}

// take reserves a slot for caller; ok is false when either cap is reached.
// A taken slot is given back with the returned release.
func (s *slots) take(caller string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.total || s.inUse[caller] >= s.perCaller {
		return nil, false
	}
	s.n++
	s.inUse[caller]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.n--
			if s.inUse[caller]--; s.inUse[caller] == 0 {
				delete(s.inUse, caller)
			}
		})
	}, true
}

// callerKey is who a cap counts against: the principal, or the client
// address when authentication is off.
func (a *api) callerKey(r *http.Request) string {
	if a.cfg.Authenticator == nil {
		return "addr:" + clientAddr(r)
	}
	return "principal:" + principalOf(r)
}

// exhausted is the 429 of a cap; retryAfter is in seconds.
func exhausted(what string, retryAfter int) problem {
	return problem{status: http.StatusTooManyRequests, code: codeResourceExhausted,
		detail: "too many " + what + " open for this caller or on this instance; retry later", retryAfter: retryAfter}
}

// shuttingDown is the answer to a request that would wait or stream on an
// instance that is shutting down: the client retries elsewhere.
func shuttingDown() problem {
	return problem{status: http.StatusServiceUnavailable, code: codeUnavailable,
		detail: "the service is shutting down; retry (another instance will answer)", retryAfter: 1}
}

// readyCache remembers the last /readyz backend check for a while, so that
// unauthenticated probes cannot make the backend work on every call.
type readyCache struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// check returns the cached result when younger than ttl, else runs ping.
// Concurrent callers share one ping.
func (c *readyCache) check(ttl time.Duration, ping func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < ttl {
		return c.err
	}
	c.err = ping()
	c.at = time.Now()
	return c.err
}

// bodyDeadline bounds the time to read r's body to Limits.BodyTimeout from
// now: the connection's read deadline is set, and lifted once the body has
// been read to its end. A body still arriving at the deadline fails the
// read (readBody answers 408), and the server, which cannot drain it in
// time either, closes the connection rather than keep it for another
// request. Requests without a body are left alone, so that :watch streams
// and waiting acquires can last.
func (a *api) bodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(a.cfg.Limits.BodyTimeout)); err != nil {
		return // not a real connection (httptest.ResponseRecorder)
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// deadlineBody lifts the read deadline when the body has been read through.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(b.lift)
	}
	return n, err
}

// timedOut reports whether err is a read that hit its deadline.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}
