package telemetry

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasesvc/leasesvc/lease"
)

// collect returns the data points of the named instrument by their lease
// attribute: the sum's or gauge's value, or the histogram's count.
func collect(t *testing.T, r *sdkmetric.ManualReader, name string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	leaseOf := func(s attribute.Set) string { v, _ := s.Value("lease"); return v.AsString() }
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[leaseOf(p.Attributes)] += float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[leaseOf(p.Attributes)] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[leaseOf(p.Attributes)] += float64(p.Count)
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

func acquired(name string) lease.Event {
	return lease.Event{Type: lease.EventAcquired, Lease: lease.Lease{Record: lease.Record{Name: name}}}
}

// TestLeaseSeriesAreBounded: with WithMaxLeaseSeries(3), the per-lease
// instruments give the first three lease names series of their own and
// record every other lease under lease="_other" (counts summed, the unheld
// gauge the longest), so the number of series, and of points per export,
// stays bounded however many leases there are.
func TestLeaseSeriesAreBounded(t *testing.T) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	m, err := NewMetrics(mp, Gauges{}, WithMaxLeaseSeries(3))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	for i := range 10 {
		name := fmt.Sprintf("lease-%d", i)
		m.Decided(ctx, acquired(name))
		m.Operation(ctx, "acquire", "lease_held", name, time.Millisecond)
		m.Seen(lease.Event{Type: lease.EventExpired, Lease: lease.Lease{Record: lease.Record{Name: name, ExpireTime: now.Add(-time.Duration(i+1) * time.Second)}}})
	}
	m.Decided(ctx, acquired("lease-1")) // a named lease stays named

	want := map[string]float64{"lease-0": 1, "lease-1": 2, "lease-2": 1, OtherLeases: 7}
	for _, inst := range []string{"leasesvc.lease.transitions"} {
		if got := collect(t, r, inst); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s by lease = %v, want %v", inst, got, want)
		}
	}
	if got, want := collect(t, r, "leasesvc.lease.contention"), map[string]float64{"lease-0": 1, "lease-1": 1, "lease-2": 1, OtherLeases: 7}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("contention by lease = %v, want %v", got, want)
	}
	// unheld_seconds: lease-9 has been unheld longest (10 s), lease-0..2 have
	// their own series.
	got := collect(t, r, "leasesvc.lease.unheld_seconds")
	if want := map[string]float64{"lease-0": 1, "lease-1": 2, "lease-2": 3, OtherLeases: 10}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("unheld_seconds by lease = %v, want %v", got, want)
	}

	// Without the option, DefaultMaxLeaseSeries names get their own.
	r2 := sdkmetric.NewManualReader()
	m2, err := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r2)), Gauges{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range DefaultMaxLeaseSeries + 5 {
		m2.Decided(ctx, acquired(fmt.Sprintf("l%d", i)))
	}
	if got := collect(t, r2, "leasesvc.lease.transitions"); len(got) != DefaultMaxLeaseSeries+1 || got[OtherLeases] != 5 {
		t.Errorf("default: %d series (_other = %v), want %d named and _other = 5", len(got), got[OtherLeases], DefaultMaxLeaseSeries)
	}
}

// TestParseMaxLeaseSeries: LEASESVC_METRICS_LEASES takes a whole number
// from 0 to MaxLeaseSeriesLimit; anything else is an error naming it.
func TestParseMaxLeaseSeries(t *testing.T) {
	for v, want := range map[string]int{"": DefaultMaxLeaseSeries, "0": 0, "25": 25, "10000": MaxLeaseSeriesLimit} {
		if got, err := ParseMaxLeaseSeries(v); err != nil || got != want {
			t.Errorf("ParseMaxLeaseSeries(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"-1", "10001", "1.5", "many", " 5"} {
		if _, err := ParseMaxLeaseSeries(v); err == nil || !strings.Contains(err.Error(), "LEASESVC_METRICS_LEASES") {
			t.Errorf("ParseMaxLeaseSeries(%q) = %v, want an error naming LEASESVC_METRICS_LEASES", v, err)
		}
	}
}
