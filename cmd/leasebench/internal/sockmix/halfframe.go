package sockmix

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tally counts by key; safe for concurrent use.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (t *tally) add(key string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]int{}
	}
	t.m[key] += n
}

func (t *tally) snapshot() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out
}

func (t *tally) sum() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, v := range t.m {
		n += v
	}
	return n
}

// refusal is the key a failed upgrade or open counts under: the upgrade's
// status ("429"), "open" for an open answered with an error, "no answer"
// for a connection that ended or timed out before it was answered.
func refusal(status int, err error) string {
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		return re.Key
	case err != nil:
		return "no answer"
	}
	return fmt.Sprint(status)
}

// writeFailure is the key a write that did not go through counts under.
func writeFailure(err error) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "stalled"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "stalled"
	}
	return "closed"
}

// HalfFrameConfig says what each socket of OpenHalfFrames does.
type HalfFrameConfig struct {
	// Open has each socket open a session (window WindowMs) before its
	// frame; otherwise it only upgrades (and the open timeout applies).
	Open     bool
	WindowMs int
	// Declared is the payload length the frame's header declares (1 MiB),
	// Sent how many bytes of it are sent (≈ 1,000,000).
	Declared uint64
	Sent     int
	// Parallel is how many sockets are set up at once.
	Parallel int
}

// HalfFrames is a set of session sockets that each sent the start of a
// large text frame and then stalled.
type HalfFrames struct {
	cfg      HalfFrameConfig
	refused  tally // upgrades and opens refused
	failed   tally // frames not sent whole: "stalled", "closed"
	ended    tally // sockets by how the service ended them
	upgraded atomic.Int64
	opened   atomic.Int64
	sent     atomic.Int64

	mu    sync.Mutex
	socks []*RawSocket
}

// halfPayload is the start of the frame's payload: a heartbeat padded
// with a string that never ends.
func halfPayload(n int) []byte {
	head := `{"type":"heartbeat","id":2,"pad":"`
	return []byte(head + strings.Repeat("x", max(n-len(head), 0)))[:n]
}

// OpenHalfFrames sets up n session sockets at addr, cfg.Parallel at a
// time, socket i as the principal whose token is token(i): each upgrades
// (and opens a session, when cfg.Open), then writes the header of a text
// frame declaring cfg.Declared bytes and the first cfg.Sent of them, and
// sends nothing more. It returns once every socket has done so (or been
// refused, or its frame stalled for 20 s); from then on each is read
// for how the service ends it.
func OpenHalfFrames(ctx context.Context, addr string, n int, token func(i int) string, cfg HalfFrameConfig) *HalfFrames {
	h := &HalfFrames{cfg: cfg}
	payload := halfPayload(cfg.Sent)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(cfg.Parallel, 1))
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, st, err := DialRaw(ctx, addr, token(i))
			if s == nil {
				h.refused.add(refusal(st, err), 1)
				return
			}
			h.upgraded.Add(1)
			h.mu.Lock()
			h.socks = append(h.socks, s)
			h.mu.Unlock()
			if cfg.Open {
				if err := s.Open(cfg.WindowMs); err != nil {
					h.refused.add(refusal(0, err), 1)
					go func() { h.ended.add(s.Watch(nil), 1) }()
					return
				}
				h.opened.Add(1)
			}
			if err := s.WritePartial(20*time.Second, cfg.Declared, payload); err != nil {
				h.failed.add(writeFailure(err), 1)
			} else {
				h.sent.Add(1)
			}
			go func() { h.ended.add(s.Watch(nil), 1) }()
		})
	}
	wg.Wait()
	return h
}

// String says what the instance did with the sockets so far: "900
// upgraded (refused: none), 900 opened, 900 sent 1000000 of 1048576 B
// (not sent: none); ended: 900×open".
func (h *HalfFrames) String() string {
	ended := h.ended.snapshot()
	if open := int(h.upgraded.Load()) - h.ended.sum(); open > 0 {
		ended["open"] = open
	}
	opened := ""
	if h.cfg.Open {
		opened = fmt.Sprintf("%d opened, ", h.opened.Load())
	}
	return fmt.Sprintf("%d upgraded (refused: %s), %s%d sent %d of %d B (not sent: %s); ended: %s",
		h.upgraded.Load(), orNone(Counts(h.refused.snapshot(), " ")), opened, h.sent.Load(), h.cfg.Sent, h.cfg.Declared,
		orNone(Counts(h.failed.snapshot(), " ")), orNone(Counts(ended, " ")))
}

// Close closes the sockets from this end.
func (h *HalfFrames) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.socks {
		s.Close()
	}
}

// orNone is s, or "none" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
