// Package cloudlog writes log/slog records as JSON lines in Cloud Logging's
// structured format: severity, message and time under the names Cloud
// Logging reads, and the trace and span of the record's context under
// logging.googleapis.com/trace and logging.googleapis.com/spanId, so that
// logs and traces link.
package cloudlog

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Keys Cloud Logging reads from a structured log line.
const (
	TraceKey   = "logging.googleapis.com/trace"
	SpanKey    = "logging.googleapis.com/spanId"
	SampledKey = "logging.googleapis.com/trace_sampled"
)

// NewHandler returns a JSON handler writing to w. project, when set, makes
// the trace field the full projects/P/traces/T that Cloud Logging links.
func NewHandler(w io.Writer, level slog.Leveler, project string) slog.Handler {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: replace})
	return &handler{Handler: h, project: project}
}

// replace renames the standard keys and maps levels to Cloud Logging
// severities.
func replace(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.MessageKey:
		a.Key = "message"
	case slog.LevelKey:
		a.Key = "severity"
		switch lvl := a.Value.Any().(slog.Level); {
		case lvl >= slog.LevelError:
			a.Value = slog.StringValue("ERROR")
		case lvl >= slog.LevelWarn:
			a.Value = slog.StringValue("WARNING")
		case lvl >= slog.LevelInfo:
			a.Value = slog.StringValue("INFO")
		default:
			a.Value = slog.StringValue("DEBUG")
		}
	}
	return a
}

type handler struct {
	slog.Handler
	project string
}

// Handle adds the trace fields of ctx's span, if any.
func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		tr := sc.TraceID().String()
		if h.project != "" {
			tr = "projects/" + h.project + "/traces/" + tr
		}
		r.AddAttrs(slog.String(TraceKey, tr), slog.String(SpanKey, sc.SpanID().String()), slog.Bool(SampledKey, sc.IsSampled()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(as), project: h.project}
}

// WithGroup implements slog.Handler.
func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), project: h.project}
}
