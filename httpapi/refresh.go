package httpapi

import (
	"context"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// DefaultStreamRefresh is how often an instance re-reads the leases under a
// prefix while a prefix stream asked for refresh events (docs/contract.md
// §10), unless Limits.StreamRefresh says otherwise.
const DefaultStreamRefresh = time.Second

// refreshers are the instance's paced re-reads of prefixes: one per prefix
// while at least one prefix stream with refresh=true watches it, shared by
// all of them, so that the backend reads grow with the prefixes watched,
// not with the streams.
type refreshers struct {
	m        *lease.Manager
	interval time.Duration // 0: off
	max      int           // refreshed prefixes at once
	timeout  time.Duration // bounds each page's read
	stopCtx  context.Context
	onError  func(prefix string, err error)

	mu sync.Mutex
	by map[string]*refresher
}

// refresher re-reads the leases under one prefix every interval and keeps
// each lease as last read, with the scan that last changed what a refresh
// event shows of it.
type refresher struct {
	rs     *refreshers
	prefix string
	cancel context.CancelFunc

	mu     sync.Mutex
	users  map[*refreshSub]struct{}
	leases map[string]*refreshed
	gen    uint64 // the newest scan's number
}

// refreshed is a lease as a scan read it.
type refreshed struct {
	l   lease.Lease
	at  time.Time // local clock when the read of its page began
	key refreshKey
	gen uint64 // the scan that last changed key
	saw uint64 // the newest scan that listed it
}

// refreshKey is what a refresh event shows of a lease, but its remaining
// time: a lease whose key did not change since a stream last heard of it
// counts down on the client as it should.
type refreshKey struct {
	token                     int64
	holder                    string
	held                      bool
	expire                    time.Time
	ttl                       time.Duration
	priority                  int
	reservedFor               string
	reservedUntil             time.Time
	yieldTo                   string
	candidates, bestCandidate int           // bestCandidate −1: none
	session                   bool          // held through a session (docs/contract.md §14)
	sessionWindow             time.Duration // its window, when session
}

func keyOf(l lease.Lease) refreshKey {
	k := refreshKey{token: l.FencingToken, holder: l.Holder, held: l.Held(), expire: l.ExpireTime, ttl: l.TTL,
		priority: l.Priority, yieldTo: l.YieldTo(), candidates: l.CandidateCount(), bestCandidate: -1}
	if l.Session {
		k.session, k.sessionWindow = true, l.SessionWindow
	}
	k.reservedFor, k.reservedUntil = l.Reservation()
	if p, ok := l.BestCandidatePriority(); ok {
		k.bestCandidate = p
	}
	return k
}

// refreshSub is one stream's share of a refresher: C says (without
// blocking the refresher) that a scan changed something since the stream
// last took the changes.
type refreshSub struct {
	r   *refresher
	C   chan struct{}
	gen uint64 // the scan whose changes the stream has taken
}

// subscribe joins (or starts) the refresher of prefix; nil when refresh is
// off. ok is false when the instance already re-reads its most prefixes
// and prefix is not one of them. The stream must call close when it ends.
func (rs *refreshers) subscribe(prefix string) (s *refreshSub, ok bool) {
	if rs.interval <= 0 {
		return nil, true
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.by[prefix]
	if r == nil && len(rs.by) >= rs.max {
		return nil, false
	}
	if r == nil {
		ctx, cancel := context.WithCancel(rs.stopCtx)
		r = &refresher{rs: rs, prefix: prefix, cancel: cancel, users: map[*refreshSub]struct{}{}, leases: map[string]*refreshed{}}
		rs.by[prefix] = r
		go r.run(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s = &refreshSub{r: r, C: make(chan struct{}, 1), gen: r.gen}
	r.users[s] = struct{}{}
	return s, true
}

// close leaves the refresher, and stops it when it was the last stream.
func (s *refreshSub) close() {
	rs := s.r.rs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	s.r.mu.Lock()
	delete(s.r.users, s)
	last := len(s.r.users) == 0
	s.r.mu.Unlock()
	if last {
		s.r.cancel()
		delete(rs.by, s.r.prefix)
	}
}

// take returns the leases whose refresh key changed in the scans since the
// stream's last take, with the local time each was read.
func (s *refreshSub) take() []refreshed {
	r := s.r
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []refreshed
	for _, e := range r.leases {
		if e.gen > s.gen {
			out = append(out, *e)
		}
	}
	s.gen = r.gen
	return out
}

// run scans every interval (measured from the start of one scan to the
// start of the next, and at least a quarter of it after a scan that took
// longer) until ctx ends.
func (r *refresher) run(ctx context.Context) {
	iv := r.rs.interval
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		err := r.scan(ctx)
		if err != nil && ctx.Err() == nil && !failing && r.rs.onError != nil {
			r.rs.onError(r.prefix, err) // once per run of failures
		}
		failing = err != nil
		t.Reset(max(iv-time.Since(start), iv/4))
	}
}

// scan lists the leases under the prefix, page by page, records what
// changed, and wakes the streams if anything did. A lease the list no
// longer has is forgotten once a scan completes without it.
func (r *refresher) scan(ctx context.Context) error {
	r.mu.Lock()
	gen := r.gen + 1
	r.mu.Unlock()
	changed := false
	req := lease.ListRequest{Prefix: r.prefix, PageSize: 1000}
	for {
		at := time.Now()
		pctx, cancel := context.WithTimeout(ctx, r.rs.timeout)
		res, err := r.rs.m.List(pctx, req)
		cancel()
		if err != nil {
			r.finish(gen, changed, false)
			return err
		}
		r.mu.Lock()
		for _, l := range res.Leases {
			k := keyOf(l)
			e := r.leases[l.Name]
			if e == nil {
				e = &refreshed{}
				r.leases[l.Name] = e
			}
			if e.gen == 0 || e.key != k {
				e.key, e.gen, changed = k, gen, true
			}
			e.l, e.at, e.saw = l, at, gen
		}
		r.mu.Unlock()
		if res.NextPageToken == "" {
			r.finish(gen, changed, true)
			return nil
		}
		req.PageToken = res.NextPageToken
	}
}

// finish ends scan gen: forgets what a complete scan did not list, and
// wakes the streams when something changed.
func (r *refresher) finish(gen uint64, changed, complete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if complete {
		for n, e := range r.leases {
			if e.saw != gen {
				delete(r.leases, n)
			}
		}
	}
	r.gen = gen
	if !changed {
		return
	}
	for s := range r.users {
		select {
		case s.C <- struct{}{}:
		default:
		}
	}
}
