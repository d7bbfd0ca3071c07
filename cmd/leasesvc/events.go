package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/notify"
	"github.com/leasesvc/leasesvc/sweeper"
)

// events is the event plumbing of one instance: every change of holding
// goes to the other instances (through the transport newTransport chose)
// and to this instance's watchers; events from other instances wake this
// instance's waiting acquires and watchers; the elected sweeper announces
// expiries.
type events struct {
	hub       *hub.Hub
	transport notify.Transport // nil when events stay on this instance
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
	// recordRetention is the sweeper's Config.RecordRetention
	// (LEASESVC_SESSION_RECORD_RETENTION), set before start.
	recordRetention time.Duration
	audit           *audit.Log // one line per change of holding decided here
}

// observe sends the events' metrics to obs: publish attempts (through
// publishAttempt), and every event seen, for unheld_seconds. It is called
// before the first event.
func (e *events) observe(obs *observability) { e.obs = obs }

// publishAttempt is the Pub/Sub transport's Observe.
func (e *events) publishAttempt(a notify.Attempt) {
	if e.obs != nil {
		e.obs.metrics.PublishAttempt(context.Background(), a.Event.Type, a.Err, a.Latency)
	}
}

// sweeping reports whether this instance runs the expiry sweeper now.
func (e *events) sweeping() bool { return e.sweeper != nil && e.sweeper.Leading() }

// newEvents reads LEASESVC_RECENT_EVENTS (how many recent events the hub
// keeps for prefix streams to replay; default hub.DefaultRecent, 0 … 1,000,000)
// and connects the transport to the other instances (newTransport).
func newEvents(ctx context.Context, getenv func(string) string, store backend.Store, instance string, log *slog.Logger) (*events, error) {
	recent := hub.DefaultRecent
	if v := getenv("LEASESVC_RECENT_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			return nil, fmt.Errorf("LEASESVC_RECENT_EVENTS=%q: want an integer 0 … 1000000", v)
		}
		recent = n
	}
	e := &events{hub: hub.NewWithRecent(recent), log: log}
	t, err := newTransport(ctx, getenv, store, instance, log, e.publishAttempt)
	if err != nil {
		return nil, err
	}
	e.transport = t
	return e, nil
}

// changed is the Manager's OnChange: a change made on this instance.
func (e *events) changed(ev lease.Event) {
	e.audit.Change(context.Background(), ev)
	if e.transport != nil {
		_ = e.transport.Publish(ev) // a dropped event is logged and counted by the transport
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

// start runs the transport's subscriber (when there is a transport) and
// the sweeper (when the backend can scan by expiry) until stop.
func (e *events) start(ctx context.Context, m *lease.Manager, store backend.Store, instance string) error {
	ctx, e.cancel = context.WithCancel(ctx)
	if e.transport != nil {
		e.wg.Go(func() {
			err := e.transport.Subscribe(ctx, notify.Handler{Event: func(ev lease.Event) { e.seen(m, ev) }, Ended: m.Wake})
			if err != nil {
				e.log.Error("events: listener stopped; waiters fall back to expiry timers", "err", err)
			}
		})
	}
	scanner, ok := store.(backend.ExpiryScanner)
	if !ok {
		e.log.Info("sweeper: off: the backend cannot scan by expiry time")
		return nil
	}
	s, err := sweeper.New(sweeper.Config{Manager: m, Scanner: scanner, Holder: instance, Logger: e.log, RetainFree: e.retainFree, RecordRetention: e.recordRetention, Emit: func(ev lease.Event) {
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
	// Buffered events are flushed within what is left of ctx (at least
	// 500 ms).
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(time.Until(deadline(ctx)), 500*time.Millisecond))
	defer cancel()
	if e.transport != nil {
		return e.transport.Close(fctx)
	}
	return nil
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
