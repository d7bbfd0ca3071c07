package sockmix

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// SessionSet is a set of session sockets that opened a session, keep it
// alive with heartbeats and read every answer: their requests, not their
// reading, are what the instance has to hold (PaddedWaits, LeaseTable).
type SessionSet struct {
	windowMs int
	refused  tally // upgrades and opens refused
	answers  tally // answers by Message.Key
	failed   tally // requests not sent: "stalled", "closed"
	ended    tally // sockets by how the service ended them
	opened   atomic.Int64
	sent     atomic.Int64
	answered atomic.Int64
	stop     chan struct{}
	beats    sync.WaitGroup

	mu    sync.Mutex
	socks []*RawSocket
}

func newSessionSet(windowMs int) *SessionSet {
	return &SessionSet{windowMs: windowMs, stop: make(chan struct{})}
}

// open upgrades and opens one session; nil when the instance refused it
// (counted). From then on the socket is read, each answer to a request
// (result or error with re) counted and given to onAnswer (nil: none),
// and heartbeats go out every window/4.
func (ss *SessionSet) open(ctx context.Context, addr, token string, onAnswer func(Message)) *RawSocket {
	s, st, err := DialRaw(ctx, addr, token)
	if s == nil {
		ss.refused.add(refusal(st, err), 1)
		return nil
	}
	ss.mu.Lock()
	ss.socks = append(ss.socks, s)
	ss.mu.Unlock()
	if err := s.Open(ss.windowMs); err != nil {
		ss.refused.add(refusal(0, err), 1)
		go func() { ss.ended.add(s.Watch(nil), 1) }()
		return nil
	}
	ss.opened.Add(1)
	go func() {
		ss.ended.add(s.Watch(func(m Message) {
			if m.Type == "ack" || m.Re == 0 && m.Type != "error" {
				return // acks and pushes
			}
			ss.answers.add(m.Key(), 1)
			ss.answered.Add(1)
			if onAnswer != nil {
				onAnswer(m)
			}
		}), 1)
	}()
	ss.beats.Go(func() {
		every := time.Duration(ss.windowMs) * time.Millisecond / 4
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ss.stop:
				return
			case <-tick.C:
			}
			if err := s.Request(every, func(id int64) [][]byte { return [][]byte{fmt.Appendf(nil, `{"type":"heartbeat","id":%d}`, id)} }); err != nil {
				return
			}
		}
	})
	return s
}

// send writes one request, the parts build makes for its id, within 30 s.
func (ss *SessionSet) send(s *RawSocket, build func(id int64) [][]byte) bool {
	if err := s.Request(30*time.Second, build); err != nil {
		ss.failed.add(writeFailure(err), 1)
		return false
	}
	ss.sent.Add(1)
	return true
}

// Opened is how many sessions were opened.
func (ss *SessionSet) Opened() int { return int(ss.opened.Load()) }

// String says what the instance did with the sessions so far: "20
// opened (refused: none); 2000 sent (not sent: none), answered: none,
// 2000 unanswered; ended: 20×open".
func (ss *SessionSet) String() string {
	ss.mu.Lock()
	n := len(ss.socks)
	ss.mu.Unlock()
	ended := ss.ended.snapshot()
	if open := n - ss.ended.sum(); open > 0 {
		ended["open"] = open
	}
	return fmt.Sprintf("%d opened (refused: %s); %d sent (not sent: %s), answered: %s, %d unanswered; ended: %s",
		ss.Opened(), orNone(Counts(ss.refused.snapshot(), " ")), ss.sent.Load(), orNone(Counts(ss.failed.snapshot(), " ")),
		orNone(Counts(ss.answers.snapshot(), " ")), ss.sent.Load()-ss.answered.Load(), orNone(Counts(ended, " ")))
}

// Close stops the heartbeats and closes the sockets from this end.
func (ss *SessionSet) Close() {
	close(ss.stop)
	ss.mu.Lock()
	for _, s := range ss.socks {
		s.Close()
	}
	ss.mu.Unlock()
	ss.beats.Wait()
}

// MaxWaitMs is the longest wait an acquire may ask for (lease.DefaultMaxWait).
const MaxWaitMs = 60_000

// OpenPaddedWaits opens one session per principal (0 … principals-1, with
// token(p), 4 principals at a time) and sends per waiting acquires of
// name (which another holder holds) through each, at most 100 a second,
// as holders "w<p>.<k>", each waiting MaxWaitMs, with metadata of one
// member padded with pad spaces: compacted, it is a few bytes.
func OpenPaddedWaits(ctx context.Context, addr string, principals, per int, token func(p int) string, name string, pad, windowMs int) *SessionSet {
	ss := newSessionSet(windowMs)
	spaces := []byte(strings.Repeat(" ", pad))
	tail := []byte(`"k":"v"}}`)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for p := range principals {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s := ss.open(ctx, addr, token(p), nil)
			if s == nil {
				return
			}
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for k := range per {
				msg := func(id int64) [][]byte {
					head := fmt.Appendf(nil, `{"type":"acquire","id":%d,"name":%q,"holder":"w%d.%d","waitMs":%d,"metadata":{`, id, name, p, k, MaxWaitMs)
					return [][]byte{head, spaces, tail}
				}
				if ctx.Err() != nil || !ss.send(s, msg) {
					return
				}
				<-tick.C
			}
		})
	}
	wg.Wait()
	return ss
}

// TableName is the name of lease i of session s in LeaseTable: the
// longest a name may be (128 characters).
func TableName(s, i int) string {
	n := fmt.Sprintf("edge.table.%d.%05d.", s, i)
	return n + strings.Repeat("x", max(128-len(n), 0))
}

// TableHolder is the holder of lease i of session s in LeaseTable: the
// longest a holder may be, 256 characters, nearly all of four bytes in
// UTF-8 (printable: U+1F512, a lock).
func TableHolder(s, i int) string {
	h := fmt.Sprintf("h%d.%05d.", s, i)
	return h + strings.Repeat("\U0001F512", max(256-utf8.RuneCountInString(h), 0))
}

// OpenLeaseTable opens sessions sessions (session s with token(s)), and
// through each acquires leases leases (TableName, TableHolder), at most
// rate a second and 16 under way per session, and holds them. It returns
// once every acquire has been sent.
func OpenLeaseTable(ctx context.Context, addr string, sessions, leases int, token func(s int) string, rate, windowMs int) *SessionSet {
	ss := newSessionSet(windowMs)
	var wg sync.WaitGroup
	for si := range sessions {
		wg.Go(func() {
			inflight := make(chan struct{}, 16)
			s := ss.open(ctx, addr, token(si), func(Message) {
				select {
				case <-inflight:
				default:
				}
			})
			if s == nil {
				return
			}
			tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
			defer tick.Stop()
			for i := range leases {
				select {
				case inflight <- struct{}{}:
				case <-ctx.Done():
					return
				case <-time.After(30 * time.Second): // answers stopped coming
					return
				}
				msg := func(id int64) [][]byte {
					return [][]byte{fmt.Appendf(nil, `{"type":"acquire","id":%d,"name":%q,"holder":%q}`, id, TableName(si, i), TableHolder(si, i))}
				}
				if !ss.send(s, msg) {
					return
				}
				<-tick.C
			}
		})
	}
	wg.Wait()
	return ss
}
