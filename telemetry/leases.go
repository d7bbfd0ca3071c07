package telemetry

import (
	"fmt"
	"strconv"
	"sync"
)

// Per-lease series. Every lease name an instrument records with a lease
// attribute is a time series of that instrument, exported at every
// interval for as long as the instance lives (the SDK keeps cumulative
// series), so an unbounded number of lease names would make exports, and
// Cloud Monitoring's bill, unbounded. Only the first MaxLeaseSeries names an
// instance records get a lease attribute of their own; the others share
// lease="_other" (OtherLeases).
const (
	// DefaultMaxLeaseSeries is how many lease names get series of their
	// own per instance unless LEASESVC_METRICS_LEASES says otherwise.
	DefaultMaxLeaseSeries = 100
	// MaxLeaseSeriesLimit is the largest LEASESVC_METRICS_LEASES allowed.
	MaxLeaseSeriesLimit = 10_000
	// OtherLeases is the lease attribute of the leases past the limit. It
	// cannot be a lease name (names start with a letter or a digit).
	OtherLeases = "_other"
)

// ParseMaxLeaseSeries reads LEASESVC_METRICS_LEASES: "" is
// DefaultMaxLeaseSeries; otherwise a whole number from 0 (no per-lease
// series: every lease is _other) to MaxLeaseSeriesLimit.
func ParseMaxLeaseSeries(v string) (int, error) {
	if v == "" {
		return DefaultMaxLeaseSeries, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxLeaseSeriesLimit {
		return 0, fmt.Errorf("LEASESVC_METRICS_LEASES=%q: want a whole number from 0 to %d", v, MaxLeaseSeriesLimit)
	}
	return n, nil
}

// leaseSeries hands out the lease attribute values: a name of its own to
// the first max names, OtherLeases to the rest. It is safe for concurrent
// use.
type leaseSeries struct {
	mu    sync.Mutex
	max   int
	named map[string]struct{}
}

func newLeaseSeries(limit int) *leaseSeries {
	return &leaseSeries{max: limit, named: map[string]struct{}{}}
}

// label returns the lease attribute to record name under.
func (s *leaseSeries) label(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.named[name]; ok {
		return name
	}
	if len(s.named) < s.max {
		s.named[name] = struct{}{}
		return name
	}
	return OtherLeases
}

// Option configures NewMetrics.
type Option func(*Metrics)

// WithMaxLeaseSeries sets how many lease names get series of their own
// (default DefaultMaxLeaseSeries; 0: none, every lease is OtherLeases).
func WithMaxLeaseSeries(n int) Option {
	return func(m *Metrics) { m.leases = newLeaseSeries(max(n, 0)) }
}
