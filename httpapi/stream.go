package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/internal/overload"
	"github.com/leasesvc/leasesvc/internal/wire"
)

// errOverflow ends a stream whose client fell more than Limits.StreamBuffer
// behind.
var errOverflow = errors.New("the client fell behind")

// stream writes a :watch stream's Server-Sent Events from a goroutine of
// its own, so that a client that reads slowly or not at all holds at most
// Limits.StreamBuffer bytes of this instance's memory and never blocks the
// stream's loop (docs/contract.md §9):
//
//   - each event must be written within Limits.WriteTimeout, else the
//     connection is closed;
//   - a change that finds more than StreamBuffer bytes waiting closes the
//     stream with a final `overflow` event, where the client still takes it
//     (the client resumes with Last-Event-ID);
//   - while backlog is set (the stream's own snapshot, replay, history),
//     a write waits for room instead: those go at the client's pace;
//   - every queued byte is charged to the memory budget (acct,
//     docs/contract.md §16) until it is written or dropped; a frame the
//     budget refuses closes the stream with an `overflow` event too, whose
//     reason says so;
//   - the end of the stream's lifetime, the client going and shutdown
//     interrupt a write in progress.
//
// The stream's loop (one goroutine) calls write, event and snapshot; the
// writer goroutine alone touches the ResponseWriter until close returns.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	log     *slog.Logger
	timeout time.Duration // per event
	limit   int           // bytes queued at most
	// backlog makes write wait for room rather than overflow; the loop's
	// own field.
	backlog bool
	// acct is charged for the queue (and, by a prefix stream's lister, for
	// the snapshot chunk it holds); closed by close.
	acct *membudget.Account
	// memReason is the overflow reason of a charge the budget refused for
	// the reason given.
	memReason func(membudget.Refusal) string

	ctx    context.Context // ends with the request, the lifetime or shutdown
	cancel context.CancelFunc
	stops  []func() bool // context.AfterFunc registrations

	mu     sync.Mutex
	queue  [][]byte
	queued int
	err    error // the first of: a failed write, errOverflow
	closed bool
	final  []byte // written once the queue is dropped, on overflow
	// finished: close has returned; the end of ctx no longer interrupts
	// writes (the server still writes the response's end).
	finished bool

	wake chan struct{} // the writer has something to do
	room chan struct{} // the writer took a frame off the queue
	done chan struct{} // the writer has returned
}

// openStream starts the writer of a stream whose headers were sent,
// charging what it queues to acct (nil: a new account of r's caller),
// which close closes. The caller must
// call close when the stream ends.
func (a *api) openStream(w http.ResponseWriter, r *http.Request, acct *membudget.Account) *stream {
	if acct == nil {
		acct = a.account(r)
	}
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.Limits.StreamLifetime)
	s := &stream{w: w, rc: rc, log: a.log, timeout: a.cfg.Limits.WriteTimeout, limit: a.cfg.Limits.StreamBuffer,
		ctx: ctx, cancel: cancel, acct: acct, memReason: a.memoryReason,
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{})}
	s.stops = append(s.stops,
		context.AfterFunc(a.stopCtx, cancel),
		// A write blocked on a client that does not read ends now.
		context.AfterFunc(ctx, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.finished {
				_ = rc.SetWriteDeadline(time.Now())
			}
		}))
	// Past the soft threshold the oldest streams are shed: their final
	// overflow event says why (docs/contract.md §16).
	unregister := a.cfg.Overload.Register(a.callerKey(r), overload.KindStream, func(overload.Level) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err == nil {
			s.overflow("this instance is overloaded and shed the stream; reconnect with Last-Event-ID to resume (another instance may answer)")
		}
	})
	s.stops = append(s.stops, func() bool { unregister(); return true })
	go s.run()
	return s
}

// ok reports whether the stream may go on.
func (s *stream) ok() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && s.ctx.Err() == nil
}

// fail ends the stream with err, unless it has ended already.
func (s *stream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	s.signal(s.wake)
}

// write queues b. A change that does not fit ends the stream (errOverflow);
// with backlog set, write waits for room, or for the stream to end.
func (s *stream) write(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.err == nil && s.queued > 0 && s.queued+len(b) > s.capacity() {
		if !s.backlog {
			s.log.InfoContext(s.ctx, "watch stream closed: the client fell behind", "queuedBytes", s.queued, "streamBuffer", s.limit)
			s.overflow("the client fell more than " + strconv.Itoa(s.limit) + " bytes behind the stream; reconnect with Last-Event-ID to resume")
			return
		}
		s.mu.Unlock()
		select {
		case <-s.room:
		case <-s.done:
		case <-s.ctx.Done():
		}
		s.mu.Lock()
		if s.ctx.Err() != nil {
			return
		}
	}
	if s.err != nil {
		return
	}
	if !s.acct.Grow(int64(len(b))) {
		s.log.InfoContext(s.ctx, "watch stream closed: the memory budget refused its charge", "queuedBytes", s.queued, "frameBytes", len(b))
		s.overflow(s.memReason(s.acct.Refusal()))
		return
	}
	s.queue = append(s.queue, b)
	s.queued += len(b)
	s.signal(s.wake)
}

// overflow ends the stream with a final `overflow` event saying reason;
// s.mu is held.
func (s *stream) overflow(reason string) {
	data, _ := wire.Marshal(struct {
		Reason string `json:"reason"`
	}{reason})
	s.err = errOverflow
	s.final = frame("", "overflow", data)
	s.signal(s.wake)
}

// failMemory ends the stream with an `overflow` event because the budget
// refused a charge of need bytes (the snapshot's next chunk).
func (s *stream) failMemory(need int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.log.InfoContext(s.ctx, "watch stream closed: the memory budget refused its snapshot's next chunk", "chunkBytes", need)
		s.overflow(s.memReason(s.acct.Refusal()))
	}
}

// backlogBytes bounds what a stream queues while backlog is set (its
// snapshot, replay, history), below Limits.StreamBuffer: those wait for
// room at the client's pace, and the kernel's socket buffer already keeps
// a reading client busy, so a larger queue would only be memory a client
// that stopped reading holds (docs/contract.md §16).
const backlogBytes = 64 << 10

// capacity is the most bytes the queue holds now.
func (s *stream) capacity() int {
	if s.backlog {
		return min(s.limit, backlogBytes)
	}
	return s.limit
}

// signal wakes whoever waits on c, without blocking.
func (s *stream) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run is the writer: it writes the queue in order, each frame within the
// write timeout, until the stream closes or a write fails; on overflow it
// drops the queue and writes the final event.
func (s *stream) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && s.err == nil && !s.closed {
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		if s.err != nil || s.closed {
			final := s.final
			s.acct.Shrink(int64(s.queued))
			s.queue, s.queued, s.final = nil, 0, nil
			s.mu.Unlock()
			if final != nil {
				_ = s.send(final) // where the client still takes it
			}
			return
		}
		b := s.queue[0]
		s.mu.Unlock()
		err := s.send(b)
		s.mu.Lock()
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.queued -= len(b)
		s.acct.Shrink(int64(len(b)))
		if err != nil && s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
		s.signal(s.room)
	}
}

// send writes and flushes b within the write timeout. The deadline is set
// before the context is checked, so that the context's end, which sets a
// deadline of now, cannot be overtaken by it.
func (s *stream) send(b []byte) error {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

// close ends the stream: the queue is dropped and a write in progress
// interrupted, except after an overflow, when the writer may take up to
// two write timeouts to deliver the final event. It returns once the
// writer has, leaving the connection a write timeout for the end of the
// response.
func (s *stream) close() {
	s.mu.Lock()
	s.closed = true
	overflow := errors.Is(s.err, errOverflow)
	s.mu.Unlock()
	s.signal(s.wake)
	if !overflow {
		s.cancel()
	}
	<-s.done
	s.acct.Close()
	s.cancel()
	for _, stop := range s.stops {
		stop()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
}
