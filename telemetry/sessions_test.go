package telemetry_test

import (
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leasesvc/leasesvc/telemetry"
)

// TestSessionMetrics: each session instrument counts what it names.
func TestSessionMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := telemetry.NewSessionMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	m.SessionsOpen(1)
	m.SessionsOpen(1)
	m.SessionsOpen(-1)
	m.Heartbeat()
	m.ExpiredReleases(3)
	m.ExpiredReleases(0)
	m.Resume()
	m.SessionEnded("lapsed")
	m.SessionEnded("closed")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if s, ok := mt.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					got[mt.Name] += dp.Value
					if kind, ok := dp.Attributes.Value("kind"); ok {
						got[mt.Name+"/"+kind.AsString()] += dp.Value
					}
				}
			}
		}
	}
	want := map[string]int64{"leasesvc.sessions.open": 1, "leasesvc.session.heartbeats": 1, "leasesvc.session.expired_releases": 3, "leasesvc.session.resumes": 1,
		"leasesvc.session.ends": 2, "leasesvc.session.ends/lapsed": 1, "leasesvc.session.ends/closed": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
