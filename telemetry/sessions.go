package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// SessionMetrics are the instruments of sessions (docs/contract.md §14,
// docs/operations.md). It implements session.Observer; its methods are
// safe for concurrent use.
type SessionMetrics struct {
	open      metric.Int64UpDownCounter
	heartbeat metric.Int64Counter
	expired   metric.Int64Counter
	resumes   metric.Int64Counter
	ends      metric.Int64Counter
}

// NewSessionMetrics creates the session instruments on mp.
func NewSessionMetrics(mp metric.MeterProvider) (*SessionMetrics, error) {
	meter := mp.Meter("github.com/leasesvc/leasesvc")
	m := &SessionMetrics{}
	var errs []error
	var err error
	m.open, err = meter.Int64UpDownCounter("leasesvc.sessions.open", metric.WithDescription("Sessions this instance owns."))
	errs = append(errs, err)
	m.heartbeat, err = meter.Int64Counter("leasesvc.session.heartbeats", metric.WithDescription("Session heartbeats received."))
	errs = append(errs, err)
	m.expired, err = meter.Int64Counter("leasesvc.session.expired_releases", metric.WithDescription("Leases released because their session died (no heartbeat for its window)."))
	errs = append(errs, err)
	m.resumes, err = meter.Int64Counter("leasesvc.session.resumes", metric.WithDescription("Sessions resumed on this instance."))
	errs = append(errs, err)
	m.ends, err = meter.Int64Counter("leasesvc.session.ends", metric.WithDescription("Sessions that ended on this instance, by kind (closed, expired, moved, shutdown, lapsed)."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// SessionsOpen adds delta to the sessions open.
func (m *SessionMetrics) SessionsOpen(delta int64) { m.open.Add(context.Background(), delta) }

// Heartbeat counts one heartbeat.
func (m *SessionMetrics) Heartbeat() { m.heartbeat.Add(context.Background(), 1) }

// ExpiredReleases counts n leases released on session death.
func (m *SessionMetrics) ExpiredReleases(n int64) {
	if n > 0 {
		m.expired.Add(context.Background(), n)
	}
}

// Resume counts one resume.
func (m *SessionMetrics) Resume() { m.resumes.Add(context.Background(), 1) }

// SessionEnded counts one session's end, by its kind.
func (m *SessionMetrics) SessionEnded(kind string) {
	m.ends.Add(context.Background(), 1, metric.WithAttributes(attribute.String("kind", kind)))
}
