package notify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/googleapis/gax-go/v2"

	"github.com/leasesvc/leasesvc/lease"
)

// PublisherConfig configures a Publisher. The zero value of every field
// means its default.
type PublisherConfig struct {
	// Workers is how many events are published at once; events of one lease
	// always go through the same worker, in order. Default 8.
	Workers int
	// Buffer is how many events may wait to be published; an event that
	// finds the buffer full is dropped, logged and counted. Default 10,000.
	Buffer int
	// RetryMin and RetryMax bound the jittered exponential backoff between
	// attempts. Defaults 100ms and 5s.
	RetryMin, RetryMax time.Duration
	// AttemptTimeout bounds one publish attempt. Default 10s.
	AttemptTimeout time.Duration
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called after every attempt, for metrics.
	Observe func(Attempt)
}

// Attempt describes one publish attempt.
type Attempt struct {
	// Event is the event being published.
	Event lease.Event
	// Err is nil when the attempt succeeded.
	Err error
	// Latency is how long the attempt took.
	Latency time.Duration
}

// Stats counts a Publisher's work since it started.
type Stats struct {
	// Published counts events delivered to Pub/Sub.
	Published int64
	// Failed counts failed attempts (each is retried).
	Failed int64
	// Dropped counts events refused because the buffer was full or the
	// Publisher closed, or abandoned when Close ran out of time.
	Dropped int64
}

// Publisher publishes leadership events to one topic, asynchronously. Its
// methods are safe for concurrent use.
type Publisher struct {
	pub    *pubsub.Publisher
	cfg    PublisherConfig
	queues []chan lease.Event
	wg     sync.WaitGroup
	ctx    context.Context // cancelled when Close gives up on retrying
	cancel context.CancelFunc

	mu     sync.RWMutex
	closed bool

	published, failed, dropped atomic.Int64
}

// NewPublisher returns a Publisher to topic (an ID in client's project, or
// projects/P/topics/T). It does not check that the topic exists; publishing
// to a missing topic fails and is retried and logged.
func NewPublisher(client *pubsub.Client, topic string, cfg PublisherConfig) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("notify: NewPublisher: client is nil")
	}
	if topic == "" {
		return nil, errors.New("notify: NewPublisher: topic is empty")
	}
	if cfg.Workers < 0 || cfg.Buffer < 0 || cfg.RetryMin < 0 || cfg.RetryMax < 0 || cfg.AttemptTimeout < 0 {
		return nil, errors.New("notify: PublisherConfig: Workers, Buffer, RetryMin, RetryMax and AttemptTimeout must not be negative")
	}
	cfg.Workers = cmp.Or(cfg.Workers, 8)
	cfg.Buffer = cmp.Or(cfg.Buffer, 10_000)
	cfg.RetryMin = cmp.Or(cfg.RetryMin, 100*time.Millisecond)
	cfg.RetryMax = max(cmp.Or(cfg.RetryMax, 5*time.Second), cfg.RetryMin)
	cfg.AttemptTimeout = cmp.Or(cfg.AttemptTimeout, 10*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	pub := client.Publisher(topic)
	pub.EnableMessageOrdering = true
	pub.PublishSettings.DelayThreshold = time.Millisecond
	pub.PublishSettings.Timeout = cfg.AttemptTimeout
	p := &Publisher{pub: pub, cfg: cfg, queues: make([]chan lease.Event, cfg.Workers)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	for i := range p.queues {
		p.queues[i] = make(chan lease.Event, max(cfg.Buffer/cfg.Workers, 1))
		p.wg.Go(func() { p.work(p.queues[i]) })
	}
	return p, nil
}

// Publish queues ev and returns at once; it reports false when the event
// was dropped (buffer full, or the Publisher closed). It never blocks the
// lease operation that produced the event.
func (p *Publisher) Publish(ev lease.Event) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.closed {
		select {
		case p.queues[p.worker(ev.Lease.Name)] <- ev:
			return true
		default:
		}
	}
	p.dropped.Add(1)
	p.cfg.Logger.Error("notify: event dropped", "ce-id", CEID(ev), "closed", p.closed)
	return false
}

// Close stops accepting events and delivers the buffered ones, retrying
// until ctx is done; what is still undelivered then is dropped and counted.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		for _, q := range p.queues {
			close(q)
		}
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		p.cancel()
		<-done
		err = fmt.Errorf("notify: close: undelivered events dropped: %w", ctx.Err())
	}
	p.cancel()
	p.pub.Stop()
	return err
}

// SetObserver replaces PublisherConfig.Observe; call it before the first
// Publish.
func (p *Publisher) SetObserver(f func(Attempt)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Observe = f
}

// Stats returns the Publisher's counters.
func (p *Publisher) Stats() Stats {
	return Stats{Published: p.published.Load(), Failed: p.failed.Load(), Dropped: p.dropped.Load()}
}

func (p *Publisher) worker(name string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(len(p.queues)))
}

// work publishes a queue's events one after another, each until delivered.
func (p *Publisher) work(q <-chan lease.Event) {
	for ev := range q {
		if !p.deliver(ev) {
			p.dropped.Add(1)
		}
	}
}

// deliver publishes ev, retrying with backoff, until it succeeds or the
// Publisher gives up (Close out of time).
func (p *Publisher) deliver(ev lease.Event) bool {
	msg, err := Encode(ev)
	if err != nil {
		p.cfg.Logger.Error("notify: event not encodable", "ce-id", CEID(ev), "err", err)
		return false
	}
	bo := gax.Backoff{Initial: p.cfg.RetryMin, Max: p.cfg.RetryMax, Multiplier: 2}
	for attempt := 1; ; attempt++ {
		start := time.Now()
		actx, cancel := context.WithTimeout(p.ctx, p.cfg.AttemptTimeout)
		res := p.pub.Publish(actx, &pubsub.Message{Data: msg.Data, Attributes: msg.Attributes, OrderingKey: msg.OrderingKey})
		_, err := res.Get(actx)
		cancel()
		p.mu.RLock()
		observe := p.cfg.Observe
		p.mu.RUnlock()
		if observe != nil {
			observe(Attempt{Event: ev, Err: err, Latency: time.Since(start)})
		}
		if err == nil {
			p.published.Add(1)
			return true
		}
		p.failed.Add(1)
		p.pub.ResumePublish(msg.OrderingKey) // a failure pauses the ordering key
		p.cfg.Logger.Warn("notify: publish failed; retrying", "ce-id", msg.Attributes["ce-id"], "attempt", attempt, "err", err)
		select {
		case <-p.ctx.Done():
			p.cfg.Logger.Error("notify: event abandoned at shutdown", "ce-id", msg.Attributes["ce-id"])
			return false
		case <-time.After(bo.Pause()):
		}
	}
}
