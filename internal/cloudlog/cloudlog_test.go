package cloudlog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasesvc/leasesvc/internal/cloudlog"
)

func TestStructuredLineWithTrace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(cloudlog.NewHandler(&buf, slog.LevelDebug, "proj"))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	log.With("lease", "a").WarnContext(ctx, "careful", "n", 1)
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"severity": "WARNING", "message": "careful", "lease": "a", "n": 1.0,
		cloudlog.TraceKey: "projects/proj/traces/4bf92f3577b34da6a3ce929d0e0e4736", cloudlog.SpanKey: "00f067aa0ba902b7", cloudlog.SampledKey: true}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (line %s)", k, got[k], v, buf.String())
		}
	}
	if _, ok := got["time"]; !ok {
		t.Error("no time field")
	}
	buf.Reset()
	log.Debug("no span")
	_ = json.Unmarshal(buf.Bytes(), &got)
	if got["severity"] != "DEBUG" {
		t.Errorf("severity %v, want DEBUG", got["severity"])
	}
	if bytes.Contains(buf.Bytes(), []byte(cloudlog.TraceKey)) {
		t.Errorf("trace field without a span: %s", buf.String())
	}
}
