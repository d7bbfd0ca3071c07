package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/notify"
	"github.com/leasesvc/leasesvc/sweeper"
)

// events is the event plumbing of one instance: every change of holding
// goes to Pub/Sub (when LEASESVC_PUBSUB_TOPIC is set) and to this
// instance's watchers; events from other instances wake this instance's
// waiting acquires and watchers; the elected sweeper announces expiries.
type events struct {
	hub       *hub.Hub
	publisher *notify.Publisher // nil when events are off
	client    *pubsub.Client
	log       *slog.Logger
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stopOnce  sync.Once
	stopErr   error
	obs       *observability
	sweeper   *sweeper.Sweeper
	// retainFree is the sweeper's Config.RetainFree (LEASESVC_RETAIN_FREE),
	// set before start.
	retainFree time.Duration
	audit      *audit.Log // one line per change of holding decided here
	relay      *relay     // without Pub/Sub, over the backend's notifications; nil when it has none
}

// observe sends the events' metrics to obs: publish attempts, and every
// event seen, for unheld_seconds.
func (e *events) observe(obs *observability) {
	e.obs = obs
	if e.publisher != nil {
		e.publisher.SetObserver(func(a notify.Attempt) {
			obs.metrics.PublishAttempt(context.Background(), a.Event.Type, a.Err, a.Latency)
		})
	}
}

// sweeping reports whether this instance runs the expiry sweeper now.
func (e *events) sweeping() bool { return e.sweeper != nil && e.sweeper.Leading() }

// topicRE matches a topic ID (3–255 characters, starting with a letter) or
// a full topic name.
var topicRE = regexp.MustCompile(`^(projects/[a-z][a-z0-9.:-]{4,61}[a-z0-9]/topics/)?[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)

// newEvents reads LEASESVC_RECENT_EVENTS (how many recent events the hub
// keeps for prefix streams to replay; default hub.DefaultRecent, 0 … 1,000,000)
// and LEASESVC_PUBSUB_TOPIC (a topic ID in LEASESVC_PROJECT, or
// GOOGLE_CLOUD_PROJECT, or a full projects/P/topics/T) and connects the
// publisher; an unset topic means no events.
func newEvents(ctx context.Context, getenv func(string) string, log *slog.Logger) (*events, error) {
	recent := hub.DefaultRecent
	if v := getenv("LEASESVC_RECENT_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			return nil, fmt.Errorf("LEASESVC_RECENT_EVENTS=%q: want an integer 0 … 1000000", v)
		}
		recent = n
	}
	e := &events{hub: hub.NewWithRecent(recent), log: log}
	topic := getenv("LEASESVC_PUBSUB_TOPIC")
	if topic == "" {
		return e, nil
	}
	if !topicRE.MatchString(topic) {
		return nil, fmt.Errorf("LEASESVC_PUBSUB_TOPIC=%q: want a topic ID of 3–255 characters starting with a letter, or projects/P/topics/T", topic)
	}
	project := getenv("LEASESVC_PROJECT")
	if project == "" {
		project = getenv("GOOGLE_CLOUD_PROJECT")
	}
	if p, _, ok := strings.Cut(strings.TrimPrefix(topic, "projects/"), "/topics/"); ok && project == "" {
		project = p
	}
	if project == "" {
		return nil, errors.New("LEASESVC_PUBSUB_TOPIC is a topic ID: set LEASESVC_PROJECT (or GOOGLE_CLOUD_PROJECT), or give projects/P/topics/T")
	}
	client, err := pubsub.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("pubsub client for project %q: %w", project, err)
	}
	pub, err := notify.NewPublisher(client, notify.TopicName(project, topic), notify.PublisherConfig{Logger: log})
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("events publisher: %w", err)
	}
	e.client, e.publisher = client, pub
	return e, nil
}

// changed is the Manager's OnChange: a change made on this instance.
func (e *events) changed(ev lease.Event) {
	e.audit.Change(context.Background(), ev)
	if e.publisher != nil {
		e.publisher.Publish(ev)
	}
	if e.relay != nil {
		e.relay.publish(ev)
	}
	e.hub.Publish(ev)
}

// seen handles a change of holding made on another instance: it may free a
// lease a waiter here waits for, and this instance's watchers get it.
func (e *events) seen(m *lease.Manager, ev lease.Event) {
	if ev.Ends() { // another instance ended a holding: a waiter here may take it
		m.Wake(ev.Lease.Name)
	}
	e.hub.Publish(ev)
	e.obs.metrics.Seen(ev)
}

// start runs the Pub/Sub listener (when events are on; otherwise the
// backend's own notifications, when it has them) and the sweeper (when the
// backend can scan by expiry) until stop.
func (e *events) start(ctx context.Context, m *lease.Manager, store backend.Store, instance string, topic string) error {
	ctx, e.cancel = context.WithCancel(ctx)
	if e.client != nil {
		sub := "leasesvc-" + instance
		e.wg.Go(func() {
			err := notify.Listen(ctx, e.client, notify.ListenConfig{
				Topic: topic, Subscription: sub, Logger: e.log, DeleteTimeout: 2 * time.Second,
				Handle: func(ev lease.Event) { e.seen(m, ev) },
				Ready:  func() { e.log.Info("events: listening", "subscription", sub) },
			})
			if err != nil {
				e.log.Error("events: listener stopped; waiters fall back to expiry timers", "err", err)
			}
		})
	}
	if n, ok := store.(backend.Notifier); ok && e.client == nil {
		// No Pub/Sub: the database itself carries the events between instances.
		e.relay = newRelay(n, instance, e.log)
		e.wg.Go(func() {
			e.log.Info("events: relayed through the backend's notifications")
			_ = e.relay.listen(ctx, func(ev lease.Event) { e.seen(m, ev) }, m.Wake)
		})
	}
	scanner, ok := store.(backend.ExpiryScanner)
	if !ok {
		e.log.Info("sweeper: off: the backend cannot scan by expiry time")
		return nil
	}
	s, err := sweeper.New(sweeper.Config{Manager: m, Scanner: scanner, Holder: instance, Logger: e.log, RetainFree: e.retainFree, Emit: func(ev lease.Event) {
		e.changed(ev)
		e.obs.decided(ev)
		m.Wake(ev.Lease.Name)
	}})
	if err != nil {
		return fmt.Errorf("sweeper: %w", err)
	}
	e.sweeper = s
	e.wg.Go(func() { _ = s.Run(ctx) })
	return nil
}

// stop ends the sweeper (releasing its lease) and the listener (deleting
// its subscription), then flushes buffered events until ctx is done. Only
// the first call does anything.
func (e *events) stop(ctx context.Context) error {
	e.stopOnce.Do(func() { e.stopErr = e.doStop(ctx) })
	return e.stopErr
}

func (e *events) doStop(ctx context.Context) error {
	if e.cancel != nil {
		e.cancel()
	}
	// The sweeper releases its lease and the listener deletes its
	// subscription (within its DeleteTimeout); past ctx's deadline, go on
	// to the flush rather than overrun the shutdown budget.
	stopped := make(chan struct{})
	go func() { e.wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		e.log.Warn("events: the sweeper or listener did not stop in time", "err", ctx.Err())
	}
	var errs []error
	// Buffered events are flushed within what is left of ctx (at least
	// 500 ms): through the relay or through Pub/Sub, never both.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(time.Until(deadline(ctx)), 500*time.Millisecond))
	defer cancel()
	if e.relay != nil {
		e.relay.close(fctx)
	}
	if e.publisher != nil {
		if err := e.publisher.Close(fctx); err != nil {
			errs = append(errs, err)
		}
		s := e.publisher.Stats()
		e.log.Info("events: publisher closed", "published", s.Published, "failedAttempts", s.Failed, "dropped", s.Dropped)
	}
	if e.client != nil {
		if err := e.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close pubsub client: %w", err))
		}
	}
	return errors.Join(errs...)
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(time.Second)
}

// instanceID names this instance: LEASESVC_INSTANCE_ID, or the host name
// with a random suffix. It is the sweeper's holder identity and part of the
// instance's subscription ID, so it keeps to [a-z0-9-].
func instanceID(getenv func(string) string) string {
	if id := getenv("LEASESVC_INSTANCE_ID"); id != "" {
		return id
	}
	host, _ := os.Hostname()
	host = strings.Trim(regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(strings.ToLower(host), "-"), "-")
	if len(host) > 40 {
		host = host[:40]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	if host == "" {
		host = "instance"
	}
	return host + "-" + hex.EncodeToString(b[:])
}
