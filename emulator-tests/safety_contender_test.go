package emulatortests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/internal/history"
	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// safetyRequestTimeout bounds a contender's request (plus its waitMs): long
// enough for a healthy instance under load, short enough that a contender
// gives up on a cut backend and the request is recorded as unanswered.
const safetyRequestTimeout = 3 * time.Second

// contender is one of the safety run's clients: a loop that acquires its
// lease, renews it a few times at ttl/3, then releases it, transfers it to
// another contender of its lease or abandons it to expire, polling while
// another holds it. Three acquires in twenty are candidates of
// docs/contract.md §8: they wait, with a random priority, some asking to
// preempt; a holding asked to yield releases at its next renewal. Every
// renewal, release and transfer of a holding writes a checkpoint
// {"token":T,"n":k}. Every answer goes to the history.
type contender struct {
	id     int
	name   string // the lease it contends for
	holder string
	home   int // the instance it prefers
	rng    *rand.Rand
	run    *safetyRun
	n      int    // checkpoints written
	peers  []int  // the ids of the other contenders of its lease
	yield  string // yieldTo of the last answer classified
}

// loop runs until ctx is done; every operation it sends is bounded by
// safetyRequestTimeout, so it returns within that after ctx ends.
func (c *contender) loop(ctx context.Context) {
	cfg := c.run.cfg
	for ctx.Err() == nil {
		var wait time.Duration
		var cand *candidacy
		switch c.rng.IntN(20) {
		case 0, 1:
			wait = cfg.ttl
		case 2, 3, 4:
			wait = cfg.ttl + time.Duration(c.rng.Int64N(int64(cfg.ttl)))
			cand = &candidacy{priority: c.rng.IntN(11), preempt: c.rng.IntN(3) == 0}
		}
		e := c.acquire(cfg.ttl, wait, cand)
		if c.rng.IntN(10) == 0 {
			c.get()
		}
		switch e.Outcome {
		case history.OK:
			c.hold(ctx, e.Lease)
		case history.Maybe:
			pause(ctx, cfg.pollMin)
		default:
			pause(ctx, cfg.pollMin+time.Duration(c.rng.Int64N(int64(cfg.pollMax-cfg.pollMin))))
		}
	}
}

// observe reads the lease every 20–60 ms until ctx is done, as a follower
// that learns the leader from get does: the reads that would show a
// holding live after its successor began.
func (c *contender) observe(ctx context.Context) {
	for ctx.Err() == nil {
		c.get()
		pause(ctx, 20*time.Millisecond+time.Duration(c.rng.Int64N(int64(40*time.Millisecond))))
	}
}

// candidacy is what a candidate's acquire sends besides waitMs.
type candidacy struct {
	priority int
	preempt  bool
}

// hold renews the holding l a few times, writing a checkpoint with most
// renewals, then releases it, transfers it or abandons it. Asked to
// yield, it releases at once.
func (c *contender) hold(ctx context.Context, l *lease.Lease) {
	token := l.FencingToken
	ttl := l.TTL
	yieldTo := c.yield
	for range c.rng.IntN(5) {
		if yieldTo != "" {
			break
		}
		if !pause(ctx, ttl/3-ttl/12+time.Duration(c.rng.Int64N(int64(ttl/6)))) {
			return
		}
		var newTTL time.Duration
		if c.rng.IntN(5) == 0 {
			newTTL = c.run.cfg.ttl * time.Duration(1+c.rng.IntN(2))
		}
		var cp []byte
		if c.rng.IntN(4) != 0 {
			cp = c.checkpoint(token)
		}
		e := c.renew(token, newTTL, cp)
		if e.Outcome == history.Lost {
			return
		}
		if e.Outcome == history.OK {
			ttl = e.Lease.TTL
			yieldTo = c.yield
		}
	}
	cp := c.checkpoint(token)
	switch k := c.rng.IntN(8); {
	case yieldTo != "" || k < 3:
		if c.rng.IntN(4) == 0 {
			cp = nil
		}
		for range 3 { // a release is idempotent: retry one that went unanswered, with the same checkpoint
			if e := c.release(token, cp); e.Outcome != history.Maybe {
				return
			}
		}
	case k < 5 && len(c.peers) > 0:
		to := fmt.Sprintf("c%02d", c.peers[c.rng.IntN(len(c.peers))])
		reserve := 200*time.Millisecond + time.Duration(c.rng.Int64N(int64(800*time.Millisecond)))
		for range 3 { // repeated while nobody acquired since, a transfer is idempotent
			if e := c.transfer(token, to, reserve, cp); e.Outcome != history.Maybe {
				return
			}
		}
	default:
		pause(ctx, time.Duration(c.rng.Int64N(int64(ttl*3/2)))) // abandon: it expires, or our next acquire extends it
	}
}

// checkpoint returns the next checkpoint of the holding token.
func (c *contender) checkpoint(token int64) []byte {
	c.n++
	return fmt.Appendf(nil, `{"token":%d,"n":%d,"by":%q}`, token, c.n, c.holder)
}

// pause sleeps d; false when ctx ended first. Both kinds of contender
// wait with it.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c *contender) acquire(ttl, wait time.Duration, cand *candidacy) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"ttlMs":%d`, c.holder, ttl.Milliseconds())
	if wait > 0 {
		body += `,"waitMs":` + strconv.FormatInt(wait.Milliseconds(), 10)
	}
	e := history.Entry{Op: history.Acquire, TTL: ttl}
	if cand != nil {
		body += fmt.Sprintf(`,"priority":%d,"preempt":%t`, cand.priority, cand.preempt)
		e.Priority, e.Preempt = cand.priority, cand.preempt
	}
	return c.send(e, http.MethodPost, ":acquire", body+"}", wait)
}

func (c *contender) renew(token int64, ttl time.Duration, cp []byte) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"fencingToken":%d`, c.holder, token)
	if ttl > 0 {
		body += `,"ttlMs":` + strconv.FormatInt(ttl.Milliseconds(), 10)
	}
	if cp != nil {
		body += `,"checkpoint":` + string(cp)
	}
	return c.send(history.Entry{Op: history.Renew, Token: token, TTL: ttl, Checkpoint: cp}, http.MethodPost, ":renew", body+"}", 0)
}

func (c *contender) release(token int64, cp []byte) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"fencingToken":%d`, c.holder, token)
	if cp != nil {
		body += `,"checkpoint":` + string(cp)
	}
	return c.send(history.Entry{Op: history.Release, Token: token, Checkpoint: cp}, http.MethodPost, ":release", body+"}", 0)
}

func (c *contender) transfer(token int64, to string, reserve time.Duration, cp []byte) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"fencingToken":%d,"to":%q,"reserveMs":%d,"checkpoint":%s}`, c.holder, token, to, reserve.Milliseconds(), cp)
	return c.send(history.Entry{Op: history.Transfer, Token: token, To: to, Checkpoint: cp}, http.MethodPost, ":transfer", body, 0)
}

func (c *contender) get() history.Entry {
	return c.send(history.Entry{Op: history.Get}, http.MethodGet, "", "", 0)
}

// send sends one request to an instance (the contender's own, or another
// one time in five), classifies the answer and records it. A request that
// could not even connect (the instance is down) was never sent: it is not
// recorded and comes back as Maybe for the caller to retry later.
func (c *contender) send(e history.Entry, method, verb, body string, wait time.Duration) history.Entry {
	inst := c.home
	if c.rng.IntN(5) == 0 {
		inst = c.rng.IntN(len(c.run.insts))
	}
	e.Client, e.Name, e.Note = c.id, c.name, fmt.Sprintf("instance %d", inst)
	if e.Op != history.Get {
		e.Holder = c.holder
	}
	e.Outcome = history.Maybe
	c.yield = ""
	url := c.run.insts[inst].url() + "/v1/leases/" + c.name + verb
	ctx, cancel := context.WithTimeout(context.Background(), safetyRequestTimeout+wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		c.run.unexpected("%s: build request: %v", url, err)
		return e
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	e.Call = time.Now()
	status, raw, err := c.run.do(req)
	e.Return = time.Now()
	switch {
	case err != nil && notSent(err):
		c.run.stats.add("not sent (instance down)")
		return e
	case err != nil:
		c.run.stats.add("maybe: " + errClass(err))
	default:
		c.classify(&e, status, raw)
	}
	c.run.stats.add(e.Outcome.String())
	c.run.rec.Add(e)
	return e
}

// classify fills the entry from an HTTP answer.
func (c *contender) classify(e *history.Entry, status int, raw []byte) {
	var body struct {
		Code  string      `json:"code"`
		Lease *wire.Lease `json:"lease"`
	}
	parse := func(w *wire.Lease) *lease.Lease {
		l, err := w.ToLease()
		if err != nil {
			c.run.unexpected("%s %s: answer %d %s: %v", e.Op, e.Name, status, raw, err)
			return nil
		}
		return &l
	}
	switch {
	case status == http.StatusOK:
		var w wire.Lease
		if err := json.Unmarshal(raw, &w); err != nil {
			c.run.unexpected("%s %s: 200 %s: %v", e.Op, e.Name, raw, err)
			return
		}
		if l := parse(&w); l != nil {
			e.Outcome, e.Lease = history.OK, l
			c.yield = w.YieldTo
		}
		return
	case status >= 500:
		c.run.stats.add(fmt.Sprintf("maybe: %d", status))
		return // Maybe
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		c.run.unexpected("%s %s: %d %s: %v", e.Op, e.Name, status, raw, err)
		return
	}
	switch {
	case status == http.StatusConflict && body.Code == "lease_held" && body.Lease != nil:
		if l := parse(body.Lease); l != nil {
			e.Outcome, e.Lease = history.Held, l
		}
	case status == http.StatusConflict && body.Code == "lease_reserved" && body.Lease != nil:
		if l := parse(body.Lease); l != nil {
			e.Outcome, e.Lease = history.Reserved, l
		}
	case status == http.StatusConflict && body.Code == "lease_lost":
		e.Outcome = history.Lost
	case status == http.StatusNotFound && body.Code == "not_found" && e.Op == history.Get:
		e.Outcome = history.NotFound
	default:
		c.run.unexpected("%s %s by %s: unexpected answer %d %s", e.Op, e.Name, e.Holder, status, raw)
	}
}

// notSent reports whether a request failed before it reached the service:
// the connection could not be made.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// errClass names a transport error for the statistics.
func errClass(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return "transport error"
}

// counters counts named events from many goroutines.
type counters struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counters) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
}

func (c *counters) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}
