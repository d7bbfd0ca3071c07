// Package leadercache answers "who leads X, with which fencing token" from
// memory, kept current by the leadership events that leasesvc publishes to
// Pub/Sub (docs/events.md) or, with no subscription, by the service's
// prefix watch stream (Client.WatchPrefix, docs/contract.md §10), with a
// re-read from the service when an entry has had no news for a while.
//
// # Guarantees and limits
//
// The cache is for routing and display: finding the leader to send work
// to, showing who leads. It is never a reason to act as leader: only an
// Elector's leading ctx is. An entry can lag the truth by one event delivery
// (tens of milliseconds) while events flow, and by up to Config.TTL when
// they do not (a Pub/Sub outage, a subscription that was not there yet, a
// watch stream reconnecting).
// Pub/Sub orders messages per publisher only and every service instance
// publishes, so the cache orders events itself, by (fencing token, acquired
// before its end), and drops duplicates and late arrivals (client.Newer).
// A holding that runs out is announced by the service's sweeper within
// about a second of its expiry; until then the entry says held.
//
// A released, expired or revoked event (an operator's Client.Revoke) ends
// the holding: the entry says not held, and Leader.Lease carries the
// revocation's RevokedBy and RevokeReason. After a deleted event
// (docs/contract.md §15), or a re-read that finds a lease whose holding
// had ended gone, the entry answers as for a lease that never existed,
// until a new holding (the next token) arrives. A message whose type the cache
// does not know (an event type newer than this package) is counted in
// Stats.Malformed, acknowledged and dropped; the entry catches up at its
// next re-read, within TTL.
//
// # Without Pub/Sub
//
// Given no subscription, Run watches every lease under Config.Prefix
// through the service's prefix stream: the stream's first snapshot fills
// the cache, and each change follows as the stream delivers it. This needs
// nothing but the service (the memory backend and local development
// included); the stream reconnects by itself, resuming where it stopped.
// Events of other service instances reach the stream only when the service
// instances share events (LEASESVC_PUBSUB_TOPIC); otherwise an entry
// changed elsewhere catches up at its next re-read, within TTL.
package leadercache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/client"
)

// Config configures a Cache. The zero value is usable.
type Config struct {
	// TTL is how long an entry is answered from memory without news (an
	// event, or a read); after that the next Leader call reads the lease
	// from the service again. Default 5s.
	TTL time.Duration
	// Clock is the source of local time. Default client.SystemClock{}.
	Clock client.Clock
	// Logger receives events the cache could not read and subscription
	// failures. Default: no logging.
	Logger *slog.Logger
	// Prefix is what Run watches when the cache has no subscription: the
	// leases whose names start with it ("" for every lease the client may
	// read).
	Prefix string
}

// DefaultTTL is the TTL a zero Config.TTL means.
const DefaultTTL = 5 * time.Second

// Leader is what the cache knows of one lease.
type Leader struct {
	// Name is the lease's name.
	Name string
	// Holder is the current holder, or the last one when Held is false.
	Holder string
	// FencingToken is the holding's token; 0 when the lease never existed.
	FencingToken int64
	// Held says whether the holding was live as of the last news.
	Held bool
	// Lease is the full lease as of the last news; zero when it never
	// existed.
	Lease client.Lease
	// Source says where the last news came from: an event type
	// ("acquired", "released", "expired", "revoked"), "read", or
	// "snapshot" (a watch stream's state of the lease when it opened).
	Source string
	// Age is how long ago (local time) that news arrived.
	Age time.Duration
	// ReservedFor is the holder the free lease is reserved for
	// (docs/contract.md §8): the best waiting candidate after a holding
	// ended, or the successor of a transfer. It comes from the last news
	// and is cleared once the reservation has lapsed by the cache's
	// reckoning (ReservedUntil − the news' server time has passed on the
	// local clock since the news came) or a new holding began. Empty when
	// the lease is held or open to anyone.
	ReservedFor string
	// ReservedUntil is the server time at which the reservation lapses at
	// the latest; zero when ReservedFor is empty.
	ReservedUntil time.Time
	// Successor is, after a transfer, the holder the lease was handed to
	// (the released event's successor); empty otherwise.
	Successor string
}

// Stats counts what the cache has done.
type Stats struct {
	// Events is the number of events applied.
	Events int64
	// Dropped is the number of events dropped as duplicates or older than
	// what the cache had seen.
	Dropped int64
	// Reads is the number of reads from the service.
	Reads int64
	// Malformed is the number of messages that were not leasesvc events.
	Malformed int64
}

// entry is the cache's knowledge of one lease.
type entry struct {
	last    client.Event // the newest event or read, as an event
	exists  bool         // false: the service said not_found
	source  string
	updated time.Time
}

// Cache is a leader cache. It is safe for concurrent use.
type Cache struct {
	c   *client.Client
	sub *pubsub.Subscriber
	cfg Config

	mu      sync.Mutex
	entries map[string]*entry
	stats   Stats
}

// New returns a Cache that reads leases through c and learns of changes
// from sub, a subscription to the service's events topic with message
// ordering enabled (see Subscribe). sub may be nil: Run then follows the
// service's prefix stream of Config.Prefix instead (see the package doc).
// Call Run to receive the events; without Run the cache relies on TTL
// re-reads alone.
func New(c *client.Client, sub *pubsub.Subscriber, cfg Config) (*Cache, error) {
	if c == nil {
		return nil, errors.New("leadercache.New: Client is nil")
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("leadercache.New: Config.TTL %v must not be negative", cfg.TTL)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = client.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cache{c: c, sub: sub, cfg: cfg, entries: map[string]*entry{}}, nil
}

// Leader returns who leads the lease name, from memory when the entry had
// news within TTL, else by reading the lease from the service. A lease that
// never existed is a Leader with FencingToken 0 and Held false, not an
// error. The error is the read's when the service could not answer.
func (c *Cache) Leader(ctx context.Context, name string) (Leader, error) {
	if l, ok := c.fresh(name); ok {
		return l, nil
	}
	l, err := c.c.Get(ctx, name)
	c.mu.Lock()
	c.stats.Reads++
	c.mu.Unlock()
	switch {
	case errors.Is(err, client.ErrNotFound):
		c.applyMissing(name)
	case err != nil:
		return Leader{}, fmt.Errorf("leadercache: %w", err)
	default:
		c.apply(client.Event{Type: client.EventState, Lease: l, Time: l.ServerTime}, "read")
	}
	l2, _ := c.lookup(name)
	return l2, nil
}

// Peek returns what the cache holds for name without reading the service,
// fresh or not; false when it holds nothing.
func (c *Cache) Peek(name string) (Leader, bool) { return c.lookup(name) }

// fresh returns the entry of name if it had news within TTL.
func (c *Cache) fresh(name string) (Leader, bool) {
	l, ok := c.lookup(name)
	return l, ok && l.Age < c.cfg.TTL
}

func (c *Cache) lookup(name string) (Leader, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[name]
	if !ok {
		return Leader{}, false
	}
	l := Leader{Name: name, Source: e.source, Age: c.cfg.Clock.Now().Sub(e.updated)}
	if e.exists && e.last.Type != client.EventDeleted { // a deleted lease reads as one that never existed
		l.Holder, l.FencingToken, l.Held, l.Lease = e.last.Lease.Holder, e.last.Lease.FencingToken, held(e.last), e.last.Lease
		if e.last.Type == client.EventReleased {
			l.Successor = e.last.Successor
		}
		if r := e.last.Lease; !l.Held && r.ReservedFor != "" && l.Age < r.ReservedUntil.Sub(r.ServerTime) {
			l.ReservedFor, l.ReservedUntil = r.ReservedFor, r.ReservedUntil
		}
	}
	return l, true
}

// held says whether the holding was live as of ev: released, expired and
// revoked end it.
func held(ev client.Event) bool {
	switch ev.Type {
	case client.EventAcquired:
		return true
	case client.EventState:
		return ev.Lease.Held
	}
	return false
}

// Apply applies one event, as Run does for each message; it reports whether
// the event was newer than what the cache had and so changed the entry.
// Use it to feed the cache from another source, such as a watch stream.
func (c *Cache) Apply(ev client.Event) bool { return c.apply(ev, string(ev.Type)) }

func (c *Cache) apply(ev client.Event, source string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	isEvent := source != "read" && source != "snapshot"
	e, ok := c.entries[ev.Lease.Name]
	switch {
	case !ok || !e.exists:
		c.entries[ev.Lease.Name] = &entry{last: ev, exists: true, source: source, updated: c.cfg.Clock.Now()}
	case client.Newer(e.last, ev):
		e.last, e.source, e.updated = ev, source, c.cfg.Clock.Now()
	case !isEvent && !client.Newer(ev, e.last):
		// A read of the state the cache has: it confirms the entry.
		e.last.Lease, e.updated = ev.Lease, c.cfg.Clock.Now()
		if e.last.Type == client.EventState {
			e.source = source
		}
		return false
	default:
		if isEvent {
			c.stats.Dropped++
		}
		return false
	}
	if isEvent {
		c.stats.Events++
	}
	return true
}

// applyMissing records that the lease never existed, unless an event
// already said otherwise; an entry whose holding had ended was deleted
// since (docs/contract.md §15): it keeps its token, so that late events of
// that holding stay dropped.
func (c *Cache) applyMissing(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[name]; ok && e.exists {
		if !held(e.last) && e.last.Type != client.EventDeleted {
			e.last = client.Event{Type: client.EventDeleted, Lease: e.last.Lease, Time: e.last.Time}
			e.source, e.updated = "read", c.cfg.Clock.Now()
		}
		return
	}
	c.entries[name] = &entry{source: "read", updated: c.cfg.Clock.Now()}
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Run receives events from the subscription, or with no subscription from
// the service's prefix stream of Config.Prefix, and applies them until ctx
// is done, then returns nil. When receiving fails (Pub/Sub unreachable, the
// subscription deleted, the service refusing the stream) it logs, waits
// with backoff and receives again; meanwhile entries fall back to TTL
// re-reads.
func (c *Cache) Run(ctx context.Context) error {
	b := client.Backoff{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Multiplier: 2}
	for failures := 0; ctx.Err() == nil; failures++ {
		var err error
		if c.sub == nil {
			err = c.follow(ctx)
		} else {
			err = c.sub.Receive(ctx, c.handle)
		}
		if ctx.Err() != nil {
			break
		}
		c.cfg.Logger.Warn("leadercache: receiving events failed; entries fall back to re-reads", "err", err)
		t := c.cfg.Clock.NewTimer(b.Delay(min(failures, 10)))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C():
		}
	}
	return nil
}

// follow applies the events of the prefix stream until it fails (the
// stream itself reconnects; it fails only when ctx ends or the service
// refuses it for good).
func (c *Cache) follow(ctx context.Context) error {
	st, err := c.c.WatchPrefix(ctx, c.cfg.Prefix)
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	for {
		ev, err := st.Next()
		if err != nil {
			return err
		}
		if ev.Type == client.EventState {
			c.apply(ev, "snapshot")
			continue
		}
		c.Apply(ev)
	}
}

// handle applies one message.
func (c *Cache) handle(_ context.Context, m *pubsub.Message) {
	defer m.Ack() // a message that cannot be read never will be
	ev, err := client.ParseEvent(m.Data)
	if err != nil {
		c.mu.Lock()
		c.stats.Malformed++
		c.mu.Unlock()
		c.cfg.Logger.Warn("leadercache: not a leasesvc event", "id", m.ID, "err", err)
		return
	}
	c.Apply(ev)
}
