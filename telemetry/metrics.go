package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasesvc/leasesvc/lease"
)

// MaxTrackedUnheld bounds how many unheld leases the unheld_seconds gauge
// tracks; past it, the oldest-ended entry is forgotten.
const MaxTrackedUnheld = 10_000

// Metrics are leasesvc's instruments (docs/operations.md names each). The
// methods are safe for concurrent use.
type Metrics struct {
	ops         metric.Int64Counter
	opDuration  metric.Float64Histogram
	transitions metric.Int64Counter
	leadership  metric.Float64Histogram
	contention  metric.Int64Counter
	pubDuration metric.Float64Histogram
	pubFailures metric.Int64Counter
	retries     metric.Int64Counter

	leases   *leaseSeries // the lease attribute of each lease name (leases.go)
	mu       sync.Mutex
	unheld   map[string]time.Time // lease → end of its last holding, while unheld
	report   func() bool          // whether this instance reports unheld_seconds
	now      func() time.Time
	registry metric.Registration
}

// Gauges are the callbacks the observable instruments read.
type Gauges struct {
	// Waiting returns the acquires waiting on this instance.
	Waiting func() int
	// Watchers returns the open :watch streams on this instance.
	Watchers func() int
	// ReportUnheld says whether this instance reports
	// leasesvc.lease.unheld_seconds (the sweeping instance does).
	ReportUnheld func() bool
}

// NewMetrics creates the instruments on mp.
func NewMetrics(mp metric.MeterProvider, g Gauges, opts ...Option) (*Metrics, error) {
	meter := mp.Meter("github.com/leasesvc/leasesvc")
	m := &Metrics{unheld: map[string]time.Time{}, report: g.ReportUnheld, now: time.Now, leases: newLeaseSeries(DefaultMaxLeaseSeries)}
	for _, o := range opts {
		o(m)
	}
	if m.report == nil {
		m.report = func() bool { return true }
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	m.ops, err = meter.Int64Counter("leasesvc.operations", metric.WithDescription("Lease operations by kind and result."))
	add(err)
	m.opDuration, err = meter.Float64Histogram("leasesvc.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("Time to decide a lease operation, backend included."),
		metric.WithExplicitBucketBoundaries(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60))
	add(err)
	m.transitions, err = meter.Int64Counter("leasesvc.lease.transitions", metric.WithDescription("Changes of holding decided by this instance."))
	add(err)
	m.leadership, err = meter.Float64Histogram("leasesvc.lease.leadership.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a holding lasted, recorded when it ends."),
		metric.WithExplicitBucketBoundaries(1, 5, 15, 30, 60, 300, 900, 3600, 4*3600, 24*3600))
	add(err)
	m.contention, err = meter.Int64Counter("leasesvc.lease.contention", metric.WithDescription("Acquires refused with lease_held."))
	add(err)
	m.pubDuration, err = meter.Float64Histogram("leasesvc.events.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("Time of one attempt to publish a leadership event."))
	add(err)
	m.pubFailures, err = meter.Int64Counter("leasesvc.events.publish.failures", metric.WithDescription("Failed attempts to publish a leadership event."))
	add(err)
	m.retries, err = meter.Int64Counter("leasesvc.backend.retries", metric.WithDescription("Backend calls retried after a conflict or a transient error."))
	add(err)
	waiters, err := meter.Int64ObservableGauge("leasesvc.lease.waiters", metric.WithDescription("Acquires waiting on this instance."))
	add(err)
	watchers, err := meter.Int64ObservableGauge("leasesvc.watchers", metric.WithDescription("Open watch streams on this instance."))
	add(err)
	unheld, err := meter.Float64ObservableGauge("leasesvc.lease.unheld_seconds", metric.WithUnit("s"),
		metric.WithDescription("Seconds since the last holding of an unheld lease ended."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	m.registry, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if g.Waiting != nil {
			o.ObserveInt64(waiters, int64(g.Waiting()))
		}
		if g.Watchers != nil {
			o.ObserveInt64(watchers, int64(g.Watchers()))
		}
		if !m.report() {
			return nil
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		now := m.now()
		other, others := 0.0, false // the longest unheld of the leases without a series
		for name, ended := range m.unheld {
			secs := max(now.Sub(ended).Seconds(), 0)
			if label := m.leases.label(name); label != OtherLeases {
				o.ObserveFloat64(unheld, secs, metric.WithAttributes(attribute.String("lease", label)))
				continue
			}
			other, others = max(other, secs), true
		}
		if others {
			o.ObserveFloat64(unheld, other, metric.WithAttributes(attribute.String("lease", OtherLeases)))
		}
		return nil
	}, waiters, watchers, unheld)
	if err != nil {
		return nil, fmt.Errorf("telemetry: gauges: %w", err)
	}
	return m, nil
}

// Operation records one lease operation: op is acquire, renew, release,
// get, list or watch; result is ok or the problem code.
func (m *Metrics) Operation(ctx context.Context, op, result, name string, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("op", op), attribute.String("result", result))
	m.ops.Add(ctx, 1, attrs)
	m.opDuration.Record(ctx, d.Seconds(), attrs)
	if result == "lease_held" && name != "" {
		m.contention.Add(ctx, 1, metric.WithAttributes(attribute.String("lease", m.leases.label(name))))
	}
}

// Decided records a change of holding this instance decided.
func (m *Metrics) Decided(ctx context.Context, ev lease.Event) {
	if ev.Type == lease.EventAcquired {
		m.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("lease", m.leases.label(ev.Lease.Name))))
		if p := ev.Previous; p.FencingToken != 0 && !p.Released() {
			m.leadership.Record(ctx, p.ExpireTime.Sub(p.AcquireTime).Seconds(),
				metric.WithAttributes(attribute.String("lease", m.leases.label(p.Name)), attribute.String("end", "taken_over")))
		}
	}
	if ev.Type == lease.EventReleased || ev.Type == lease.EventRevoked {
		m.leadership.Record(ctx, ev.Lease.ExpireTime.Sub(ev.Lease.AcquireTime).Seconds(),
			metric.WithAttributes(attribute.String("lease", m.leases.label(ev.Lease.Name)), attribute.String("end", string(ev.Type))))
	}
	if ev.Type == lease.EventExpired {
		m.leadership.Record(ctx, ev.Lease.ExpireTime.Sub(ev.Lease.AcquireTime).Seconds(),
			metric.WithAttributes(attribute.String("lease", m.leases.label(ev.Lease.Name)), attribute.String("end", "expired")))
	}
}

// Seen tracks any event, decided here or elsewhere, for unheld_seconds.
func (m *Metrics) Seen(ev lease.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Type == lease.EventAcquired || ev.Type == lease.EventDeleted { // a deleted lease waits for no leader (docs/contract.md §15)
		delete(m.unheld, ev.Lease.Name)
		return
	}
	if len(m.unheld) >= MaxTrackedUnheld {
		oldest, at := "", time.Time{}
		for n, t := range m.unheld {
			if oldest == "" || t.Before(at) {
				oldest, at = n, t
			}
		}
		delete(m.unheld, oldest)
	}
	m.unheld[ev.Lease.Name] = ev.Lease.ExpireTime
}

// PublishAttempt records one attempt to publish an event of type typ.
func (m *Metrics) PublishAttempt(ctx context.Context, typ lease.EventType, err error, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("type", string(typ)))
	m.pubDuration.Record(ctx, d.Seconds(), attrs)
	if err != nil {
		m.pubFailures.Add(ctx, 1, attrs)
	}
}

// BackendRetry records a backend call retried by backend's own loop.
func (m *Metrics) BackendRetry(ctx context.Context, backendName, op string) {
	m.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("backend", backendName), attribute.String("op", op)))
}

// Close unregisters the gauges' callback.
func (m *Metrics) Close() error { return m.registry.Unregister() }
