package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"log/slog"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/cloudlog"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/telemetry"
)

// TestAcquireIsTracedCountedAndLogged: one acquire through the handler
// yields a span named by its route, an increment of leasesvc.operations
// with its result, and an access-log line carrying the span's trace ID.
func TestAcquireIsTracedCountedAndLogged(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	metrics, err := telemetry.NewMetrics(mp, telemetry.Gauges{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	m, _ := lease.NewManager(memory.New(), lease.Config{})
	h, err := httpapi.New(m, httpapi.Config{Logger: slog.New(cloudlog.NewHandler(&logs, slog.LevelInfo, "proj")),
		Observer: metrics, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	for _, holder := range []string{"a", "b"} {
		req := apiRequest(http.MethodPost, "/v1/leases/traced:acquire", strings.NewReader(`{"holder":"`+holder+`","ttlMs":30000}`))
		req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans, want 2", len(ended))
	}
	span := ended[0]
	if span.Name() != "POST /v1/leases/{name}:acquire" {
		t.Errorf("span name %q, want the route", span.Name())
	}
	if !hasAttr(span.Attributes(), "http.route", "/v1/leases/{name}:acquire") {
		t.Errorf("span attributes %v lack http.route", span.Attributes())
	}
	traceID := span.SpanContext().TraceID().String()
	if traceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace ID %s, want the caller's (W3C traceparent)", traceID)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != "leasesvc.operations" {
				continue
			}
			for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
				op, _ := dp.Attributes.Value("op")
				res, _ := dp.Attributes.Value("result")
				counts[op.AsString()+"/"+res.AsString()] += dp.Value
			}
		}
	}
	if counts["acquire/ok"] != 1 || counts["acquire/lease_held"] != 1 {
		t.Errorf("leasesvc.operations %v, want acquire/ok 1 and acquire/lease_held 1", counts)
	}

	var line map[string]any
	first, _, _ := strings.Cut(logs.String(), "\n")
	if err := json.Unmarshal([]byte(first), &line); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	if line["message"] != "request" || line["route"] != "/v1/leases/{name}:acquire" || line["status"] != 200.0 || line["lease"] != "traced" {
		t.Errorf("access log %v", line)
	}
	if line[cloudlog.TraceKey] != "projects/proj/traces/"+traceID || line[cloudlog.SpanKey] != span.SpanContext().SpanID().String() {
		t.Errorf("access log trace %v / span %v, want the request span's %s / %s", line[cloudlog.TraceKey], line[cloudlog.SpanKey], traceID, span.SpanContext().SpanID())
	}
}

func hasAttr(attrs []attribute.KeyValue, key, value string) bool {
	for _, a := range attrs {
		if string(a.Key) == key && a.Value.AsString() == value {
			return true
		}
	}
	return false
}
