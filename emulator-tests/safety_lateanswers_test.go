package emulatortests

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/rs/zerolog"
)

// The late-answer fault of the safety runs (issue 44: every answer can be
// late). For one instance per run, chosen at random, the backend's answers
// are held back on their way to the instance, the requests untouched: the
// backend decides an operation at once, and the instance hears of it
// late, at random, often past the session lease TTL (safetySessionTTL).
// It is a toxic ("late") on the downstream of the instance's backend
// proxy, beside the run's other faults (which add and remove their own
// toxics on that proxy, and stop and start it), from the start of the run
// to its fault-free tail.
//
// One answer is held at a time, the first one at least lateGap
// (exponential, this mean) after the previous hold ended, for a time drawn
// uniformly from lateMin–lateMax; what follows it on its connection waits
// behind it. The instance writes one transaction at a time (a Loop's
// batches, backend/batcher.go), so while a write's answer is held its
// other writes wait: the gap keeps it working most of the time. On
// PostgreSQL the toxic reads the protocol's messages and holds only
// answers that end a transaction (ReadyForQuery, idle): the commit of a
// write, a read's answer; so a hold never keeps a row locked, and each is
// an operation decided and answered late. Over gRPC (Firestore, Spanner)
// it holds the next chunk of any call.
const (
	lateMin = 50 * time.Millisecond
	lateMax = 5 * safetySessionTTL / 2
	lateGap = 2 * time.Second
)

func init() { toxics.Register("late", new(lateToxic)) }

// lateRuns are the counters of the late toxics, by their key attribute
// (the toxic's attributes come from JSON, so it finds its counters here).
var lateRuns sync.Map // string → *lateCounts

// lateCounts is what a late toxic did.
type lateCounts struct {
	held, pastTTL atomic.Int64
	longest       atomic.Int64 // nanoseconds
}

// lateToxic holds back, at random, one chunk of a stream (an answer of the
// backend, or part of one) and, behind it, the rest of the stream, as a
// partition on the way back from the backend would.
type lateToxic struct {
	Key string `json:"key"`
	// PG: the stream is PostgreSQL's protocol (hold only the ends of
	// transactions).
	PG    bool  `json:"pg"`
	GapMs int64 `json:"gapMs"` // the mean time from a hold to the next
	MinMs int64 `json:"minMs"`
	MaxMs int64 `json:"maxMs"`
	TTLMs int64 `json:"ttlMs"` // a hold longer than this counts as past the TTL

	// One toxic serves every connection of its proxy: one hold at a time.
	mu      sync.Mutex
	next    time.Time // the next hold begins at the first answer after it
	holding bool
	counted *lateCounts
}

// lateState is one connection's: where its PostgreSQL messages are, and
// the chunk held (kept across an interruption: another toxic added or
// removed after this one).
type lateState struct {
	pg    pgReader
	held  *stream.StreamChunk
	until time.Time
	hold  bool // held is a hold (not a chunk an interruption kept)
}

// NewState implements toxics.StatefulToxic.
func (t *lateToxic) NewState() any { return &lateState{} }

// holds reports whether c is to be held, and then counts it held.
func (t *lateToxic) holds(st *lateState, c *stream.StreamChunk) bool {
	if t.PG && !st.pg.endsTransaction(c.Data) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.next.IsZero() { // the first answer of the run
		t.next = c.Timestamp.Add(t.gap())
	}
	if t.holding || c.Timestamp.Before(t.next) {
		return false
	}
	t.holding = true
	return true
}

// released ends the hold under way.
func (t *lateToxic) released() {
	t.mu.Lock()
	t.holding, t.next = false, time.Now().Add(t.gap())
	t.mu.Unlock()
}

func (t *lateToxic) gap() time.Duration {
	return time.Duration(rand.ExpFloat64() * float64(time.Duration(t.GapMs)*time.Millisecond))
}

func (t *lateToxic) counts() *lateCounts {
	if t.counted == nil {
		c, _ := lateRuns.LoadOrStore(t.Key, &lateCounts{})
		t.counted = c.(*lateCounts)
	}
	return t.counted
}

// Pipe implements toxics.Toxic.
func (t *lateToxic) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*lateState)
	for {
		if st.held == nil {
			var c *stream.StreamChunk
			select {
			case <-stub.Interrupt:
				return
			case c = <-stub.Input:
			}
			if c == nil {
				stub.Close()
				return
			}
			if !t.holds(st, c) {
				select {
				case stub.Output <- c:
				case <-stub.Interrupt: // sent when the next Pipe begins
					st.held, st.until, st.hold = c, time.Time{}, false
					return
				}
				continue
			}
			d := time.Duration(t.MinMs)*time.Millisecond + rand.N(time.Duration(t.MaxMs-t.MinMs)*time.Millisecond+1)
			st.held, st.until, st.hold = c, c.Timestamp.Add(d), true
			n := t.counts()
			n.held.Add(1)
			if d > time.Duration(t.TTLMs)*time.Millisecond {
				n.pastTTL.Add(1)
			}
			for old := n.longest.Load(); int64(d) > old && !n.longest.CompareAndSwap(old, int64(d)); old = n.longest.Load() {
			}
		}
		if wait := time.Until(st.until); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-stub.Interrupt:
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		if st.hold { // before the send, which a connection gone may block for good
			st.hold = false
			t.released()
		}
		select {
		case stub.Output <- st.held:
		case <-stub.Interrupt:
			return
		}
		st.held = nil
	}
}

// pgReader follows the messages of PostgreSQL's protocol from the server
// (a type byte, a length that counts itself, the payload) across chunks.
type pgReader struct {
	head [5]byte
	n    int // bytes of head read
	left int // payload bytes of the current message still to come
	typ  byte
}

// endsTransaction reads b and reports whether it completes a
// ReadyForQuery whose status is idle: the end of an answer after which no
// transaction is open.
func (r *pgReader) endsTransaction(b []byte) bool {
	ends := false
	for len(b) > 0 {
		if r.left == 0 {
			k := copy(r.head[r.n:], b)
			r.n, b = r.n+k, b[k:]
			if r.n < len(r.head) {
				break
			}
			r.typ, r.left, r.n = r.head[0], int(binary.BigEndian.Uint32(r.head[1:]))-4, 0
			r.left = max(r.left, 0)
			continue
		}
		if r.typ == 'Z' && r.left == 1 && b[0] == 'I' {
			ends = true
		}
		k := min(r.left, len(b))
		r.left, b = r.left-k, b[k:]
	}
	return ends
}

// Cleanup implements toxics.CleanupToxic: a chunk held when the toxic is
// removed goes on at once.
func (t *lateToxic) Cleanup(stub *toxics.ToxicStub) {
	st, ok := stub.State.(*lateState)
	if !ok || st.held == nil {
		return
	}
	if st.hold {
		st.hold = false
		t.released()
	}
	select {
	case stub.Output <- st.held:
	case <-time.After(5 * time.Second): // the connection is gone
	}
	st.held = nil
}

// startLateAnswers puts the late toxic on the backend proxy of one
// instance, chosen at random, until the fault-free tail before end. It
// returns what it did, for the run's log (after the run).
func (r *safetyRun) startLateAnswers(t *testing.T, end time.Time) func() string {
	t.Helper()
	in := r.insts[rand.IntN(len(r.insts))]
	key := fmt.Sprintf("%s-%p", t.Name(), r)
	counts := &lateCounts{}
	lateRuns.Store(key, counts)
	t.Cleanup(func() { lateRuns.Delete(key) })
	pg, which := false, fmt.Sprintf("one at a time, %v apart on average", lateGap)
	if r.cfg.backend == "postgres" {
		pg, which = true, fmt.Sprintf("answers that end a transaction, one at a time, %v apart on average", lateGap)
	}
	spec := fmt.Sprintf(`{"name":"late","type":"late","stream":"downstream","attributes":{"key":%q,"pg":%t,"gapMs":%d,"minMs":%d,"maxMs":%d,"ttlMs":%d}}`,
		key, pg, lateGap.Milliseconds(), lateMin.Milliseconds(), lateMax.Milliseconds(), safetySessionTTL.Milliseconds())
	if _, err := in.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		t.Fatalf("add the late toxic to instance %d: %v", in.idx, err)
	}
	start := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() {
		faultWait(r.ctx, time.Until(end.Add(-faultTail)))
		if err := in.proxy.Toxics.RemoveToxic(context.Background(), "late"); err != nil {
			r.unexpected("remove the late toxic from instance %d: %v", in.idx, err)
		}
		stopped <- time.Since(start)
	}()
	return func() string {
		var ran time.Duration
		select {
		case ran = <-stopped:
		case <-r.ctx.Done():
		}
		return fmt.Sprintf("instance %d's backend answers held back for %v: %d holds of %v–%v (%s), %d of them past the session lease TTL %v, the longest %v",
			in.idx, ran.Round(100*time.Millisecond), counts.held.Load(), lateMin, lateMax, which, counts.pastTTL.Load(), safetySessionTTL,
			time.Duration(counts.longest.Load()).Round(time.Millisecond))
	}
}

// TestLateToxic checks the late toxic itself, over an echo server: an
// answer is held for its hold, not lost or reordered; a hold survives
// another toxic added and removed behind it (as the run's other faults
// do); and removing the toxic delivers what it held at once.
func TestLateToxic(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "late-test", "127.0.0.1:0", ln.Addr().String())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	add := func(spec string) {
		t.Helper()
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			t.Fatalf("add %s: %v", spec, err)
		}
	}
	remove := func(name string) {
		t.Helper()
		if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
			t.Fatalf("remove %s: %v", name, err)
		}
	}
	key := "TestLateToxic"
	counts := &lateCounts{}
	lateRuns.Store(key, counts)
	t.Cleanup(func() { lateRuns.Delete(key) })
	const hold = 150 * time.Millisecond
	add(fmt.Sprintf(`{"name":"late","type":"late","stream":"downstream","attributes":{"key":%q,"gapMs":0,"minMs":%d,"maxMs":%d,"ttlMs":100}}`,
		key, hold.Milliseconds(), hold.Milliseconds()))

	c, err := net.Dial("tcp", p.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	echo := func(msg string, limit time.Duration) (time.Duration, error) {
		sent := time.Now()
		if _, err := c.Write([]byte(msg)); err != nil {
			return 0, err
		}
		_ = c.SetReadDeadline(time.Now().Add(limit))
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			return time.Since(sent), err
		}
		if string(got) != msg {
			return time.Since(sent), fmt.Errorf("echo %q: got %q", msg, got)
		}
		return time.Since(sent), nil
	}
	for _, msg := range []string{"one", "two", "three"} {
		took, err := echo(msg, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took < hold {
			t.Errorf("echo %q answered after %v: want it held %v", msg, took, hold)
		}
	}
	if n, past := counts.held.Load(), counts.pastTTL.Load(); n != 3 || past != 3 {
		t.Errorf("counted %d holds, %d past the TTL: want 3 and 3", n, past)
	}

	// A long hold, interrupted by another toxic added and removed behind it.
	remove("late")
	add(fmt.Sprintf(`{"name":"late","type":"late","stream":"downstream","attributes":{"key":%q,"gapMs":0,"minMs":60000,"maxMs":60000,"ttlMs":100}}`, key))
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	if !faultPoll(t.Context(), 10*time.Second, func() bool { return counts.held.Load() == 4 }) {
		t.Fatalf("the long hold did not begin")
	}
	add(`{"name":"other","type":"latency","stream":"downstream","attributes":{"latency":0}}`)
	remove("other")
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 8)); err == nil {
		t.Fatalf("a held answer went on (%d bytes) when another toxic was added and removed behind the late one", n)
	}
	remove("late")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after the late toxic was removed: read %q, %v; want the held answer at once", got, err)
	}
}

// TestPGReader checks that the late toxic finds the ends of transactions in
// PostgreSQL's messages however they are split into chunks, and nowhere
// else: not in a transaction's ReadyForQuery, nor in bytes of a payload
// that look like one.
func TestPGReader(t *testing.T) {
	msg := func(typ byte, payload string) string {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(payload)+4))
		return string(typ) + string(l[:]) + payload
	}
	idle, inTx := msg('Z', "I"), msg('Z', "T")
	commit := msg('C', "COMMIT\x00") + idle
	row := msg('D', "\x00\x01\x00\x00\x00\x06"+idle[:6]) // a data row whose value is a ReadyForQuery's bytes
	stream := msg('C', "BEGIN\x00") + inTx + row + msg('1', "") + inTx + commit + row + inTx
	endAt := len(stream) - len(row) - len(inTx) // where the one end of a transaction completes
	for _, size := range []int{1, 2, 3, 5, 7, 64, len(stream)} {
		var r pgReader
		var ends []int
		for at := 0; at < len(stream); at += size {
			chunk := stream[at:min(at+size, len(stream))]
			if r.endsTransaction([]byte(chunk)) {
				ends = append(ends, at+len(chunk))
			}
		}
		want := (endAt + size - 1) / size * size
		if want > len(stream) {
			want = len(stream)
		}
		if len(ends) != 1 || ends[0] != want {
			t.Errorf("chunks of %d bytes: ends of transactions in the chunks ending at %v, want one ending at %d", size, ends, want)
		}
	}
}
