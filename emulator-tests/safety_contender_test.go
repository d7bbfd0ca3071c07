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
// lease, renews it a few times at ttl/3, then releases it or abandons it to
// expire, polling while another holds it. Every answer goes to the history.
type contender struct {
	id     int
	name   string // the lease it contends for
	holder string
	home   int // the instance it prefers
	rng    *rand.Rand
	run    *safetyRun
}

// loop runs until ctx is done; every operation it sends is bounded by
// safetyRequestTimeout, so it returns within that after ctx ends.
func (c *contender) loop(ctx context.Context) {
	cfg := c.run.cfg
	for ctx.Err() == nil {
		var wait time.Duration
		if c.rng.IntN(10) == 0 {
			wait = cfg.ttl
		}
		e := c.acquire(cfg.ttl, wait)
		if c.rng.IntN(10) == 0 {
			c.get()
		}
		switch e.Outcome {
		case history.OK:
			c.hold(ctx, e.Lease)
		case history.Maybe:
			c.pause(ctx, cfg.pollMin)
		default:
			c.pause(ctx, cfg.pollMin+time.Duration(c.rng.Int64N(int64(cfg.pollMax-cfg.pollMin))))
		}
	}
}

// observe reads the lease every 20–60 ms until ctx is done, as a follower
// that learns the leader from get does: the reads that would show a
// holding live after its successor began.
func (c *contender) observe(ctx context.Context) {
	for ctx.Err() == nil {
		c.get()
		c.pause(ctx, 20*time.Millisecond+time.Duration(c.rng.Int64N(int64(40*time.Millisecond))))
	}
}

// hold renews the holding l a few times, then releases or abandons it.
func (c *contender) hold(ctx context.Context, l *lease.Lease) {
	token := l.FencingToken
	ttl := l.TTL
	for range c.rng.IntN(5) {
		if !c.pause(ctx, ttl/3-ttl/12+time.Duration(c.rng.Int64N(int64(ttl/6)))) {
			return
		}
		var newTTL time.Duration
		if c.rng.IntN(5) == 0 {
			newTTL = c.run.cfg.ttl * time.Duration(1+c.rng.IntN(2))
		}
		e := c.renew(token, newTTL)
		if e.Outcome == history.Lost {
			return
		}
		if e.Outcome == history.OK {
			ttl = e.Lease.TTL
		}
	}
	if c.rng.IntN(2) == 0 {
		for range 3 { // a release is idempotent: retry one that went unanswered
			if e := c.release(token); e.Outcome != history.Maybe {
				return
			}
		}
		return
	}
	c.pause(ctx, time.Duration(c.rng.Int64N(int64(ttl*3/2)))) // abandon: it expires, or our next acquire extends it
}

// pause sleeps d; false when ctx ended first.
func (c *contender) pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c *contender) acquire(ttl, wait time.Duration) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"ttlMs":%d`, c.holder, ttl.Milliseconds())
	if wait > 0 {
		body += `,"waitMs":` + strconv.FormatInt(wait.Milliseconds(), 10)
	}
	return c.send(history.Entry{Op: history.Acquire, TTL: ttl}, http.MethodPost, ":acquire", body+"}", wait)
}

func (c *contender) renew(token int64, ttl time.Duration) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"fencingToken":%d`, c.holder, token)
	if ttl > 0 {
		body += `,"ttlMs":` + strconv.FormatInt(ttl.Milliseconds(), 10)
	}
	return c.send(history.Entry{Op: history.Renew, Token: token, TTL: ttl}, http.MethodPost, ":renew", body+"}", 0)
}

func (c *contender) release(token int64) history.Entry {
	body := fmt.Sprintf(`{"holder":%q,"fencingToken":%d}`, c.holder, token)
	return c.send(history.Entry{Op: history.Release, Token: token}, http.MethodPost, ":release", body, 0)
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
