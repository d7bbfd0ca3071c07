package telemetry

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// countingExporter records how many data points each Export carried.
type countingExporter struct {
	mu      sync.Mutex
	batches []int
}

func (e *countingExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}

func (e *countingExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

func (e *countingExporter) Export(_ context.Context, rm *metricdata.ResourceMetrics) error {
	n := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				n += len(d.DataPoints)
			case metricdata.Sum[float64]:
				n += len(d.DataPoints)
			case metricdata.Gauge[int64]:
				n += len(d.DataPoints)
			case metricdata.Gauge[float64]:
				n += len(d.DataPoints)
			case metricdata.Histogram[float64]:
				n += len(d.DataPoints)
			default:
				return fmt.Errorf("unexpected data %T", m.Data)
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batches = append(e.batches, n)
	return nil
}

func (e *countingExporter) ForceFlush(context.Context) error { return nil }
func (e *countingExporter) Shutdown(context.Context) error   { return nil }

// TestExportsRespectTheTelemetryAPILimit: the periodic reader Setup uses
// splits a collection of 1,050 points (more than 200 leases' worth of
// series) into requests of at most MaxExportBatchSize (200) points, the
// most the Telemetry API accepts in one request, and loses none.
func TestExportsRespectTheTelemetryAPILimit(t *testing.T) {
	exp := &countingExporter{}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(newPeriodicReader(exp, time.Hour)))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	meter := mp.Meter("test")
	a, err := meter.Int64Counter("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := meter.Float64Histogram("b")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 700 {
		a.Add(ctx, 1, metric.WithAttributes(attribute.Int("i", i)))
	}
	for i := range 350 {
		b.Record(ctx, 1, metric.WithAttributes(attribute.Int("i", i)))
	}
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	defer exp.mu.Unlock()
	total := 0
	for _, n := range exp.batches {
		total += n
		if n > MaxExportBatchSize {
			t.Errorf("an export carried %d points, over the Telemetry API's limit of %d per request (batches %v)", n, MaxExportBatchSize, exp.batches)
		}
	}
	if total != 1050 {
		t.Errorf("exports carried %d points in all (batches %v), want 1050", total, exp.batches)
	}
	if MaxExportBatchSize > 200 {
		t.Errorf("MaxExportBatchSize = %d: the Telemetry API accepts at most 200 points per request", MaxExportBatchSize)
	}
}
