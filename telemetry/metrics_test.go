package telemetry_test

import (
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/telemetry"
)

// TestDeletedLeaseIsNotUnheld: a lease whose holding ended is reported by
// unheld_seconds until it is deleted; a deleted lease waits for no leader
// (docs/contract.md §15).
func TestDeletedLeaseIsNotUnheld(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := telemetry.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), telemetry.Gauges{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	l := lease.Lease{Record: lease.Record{Name: "team-a.old", Holder: "a", FencingToken: 1, ExpireTime: at}, ServerTime: at}
	unheld := func() int {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, mt := range sm.Metrics {
				if g, ok := mt.Data.(metricdata.Gauge[float64]); ok && mt.Name == "leasesvc.lease.unheld_seconds" {
					return len(g.DataPoints)
				}
			}
		}
		return 0
	}
	m.Seen(lease.Event{Type: lease.EventReleased, Lease: l, Time: at})
	if n := unheld(); n != 1 {
		t.Fatalf("after a release: %d unheld leases reported, want 1", n)
	}
	m.Seen(lease.Event{Type: lease.EventDeleted, Lease: l, Time: time.Now()})
	if n := unheld(); n != 0 {
		t.Fatalf("after the delete: %d unheld leases reported, want 0", n)
	}
}
