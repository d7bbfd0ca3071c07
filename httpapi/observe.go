package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Observer receives one call per lease operation, for metrics: op is
// acquire, renew, release, get, list or watch; result is ok or the problem
// code; name is the lease name, or "".
type Observer interface {
	Operation(ctx context.Context, op, result, name string, d time.Duration)
}

// reqInfo is what the handlers learn about a request for its span and its
// access-log line.
type reqInfo struct {
	route, op, name string
	principal       string // the authenticated caller, once admitted
	start           time.Time
}

type infoKey struct{}

// requestInfo returns the request's reqInfo, or nil outside observe.
func requestInfo(r *http.Request) *reqInfo {
	info, _ := r.Context().Value(infoKey{}).(*reqInfo)
	return info
}

// routed names the request's route once it is known: the span becomes
// "{METHOD} {route}" with http.route set (otelhttp alone would name it by
// the method only), and the access log and metrics carry route and lease.
func routed(r *http.Request, route, op, name string) {
	if info, ok := r.Context().Value(infoKey{}).(*reqInfo); ok {
		info.route, info.op, info.name = route, op, name
	}
	span := trace.SpanFromContext(r.Context())
	span.SetName(clip(r.Method, 32) + " " + route)
	span.SetAttributes(attribute.String("http.route", route))
	if name != "" {
		span.SetAttributes(attribute.String("leasesvc.lease", name))
	}
	if l, ok := otelhttp.LabelerFromContext(r.Context()); ok {
		l.Add(attribute.String("http.route", route))
	}
}

// statusWriter remembers the status written, and gives the response
// writeTimeout from its first byte (Limits.WriteTimeout): a client that does
// not read cannot hold a response, and the memory behind it, for longer.
// Streams then set a deadline per event (stream.send). Unwrap lets
// http.ResponseController reach the Flusher of a :watch stream.
type statusWriter struct {
	http.ResponseWriter
	status       int
	writeTimeout time.Duration
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.startDeadline()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
		w.startDeadline()
	}
	return w.ResponseWriter.Write(b)
}

// startDeadline sets the connection's write deadline for the response.
// An error means no real connection (httptest.ResponseRecorder).
func (w *statusWriter) startDeadline() {
	_ = http.NewResponseController(w.ResponseWriter).SetWriteDeadline(time.Now().Add(w.writeTimeout))
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe wraps the router: an otelhttp span per request (W3C trace context
// from the caller), then one access-log line per request and one
// Observer call per lease operation.
func (a *api) observe(next http.Handler) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := &reqInfo{start: time.Now()}
		// A keep-alive connection keeps the write deadline of its previous
		// response: lift it until this response starts.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		sw := &statusWriter{ResponseWriter: w, writeTimeout: a.cfg.Limits.WriteTimeout}
		a.bodyDeadline(sw, r) // on every route: a refused request's body is bounded too
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), infoKey{}, info)))
		d := time.Since(info.start)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		level := slog.LevelInfo
		if info.route == "/healthz" || info.route == "/readyz" {
			level = slog.LevelDebug
		}
		a.log.LogAttrs(r.Context(), level, "request",
			slog.String("method", clip(r.Method, 32)), slog.String("route", info.route), slog.String("path", clip(r.URL.Path, maxLoggedPath)),
			slog.Int("status", status), slog.Float64("latencyMs", float64(d.Microseconds())/1000), slog.String("lease", info.name),
			slog.String("principal", info.principal))
	})
	return otelhttp.NewHandler(inner, "leasesvc",
		otelhttp.WithTracerProvider(a.cfg.TracerProvider), otelhttp.WithMeterProvider(a.cfg.MeterProvider),
		otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// maxLoggedPath is the most of a request's path an access-log line carries.
const maxLoggedPath = 256

// clip cuts s to at most n bytes at a rune boundary, marking the cut with
// "…", and makes it valid UTF-8: what a log line or an answer may repeat
// of a caller's input.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\ufffd")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// observeOp reports an operation's result to the Observer.
func (a *api) observeOp(r *http.Request, result string) {
	info, ok := r.Context().Value(infoKey{}).(*reqInfo)
	if !ok || a.cfg.Observer == nil || info.op == "" {
		return
	}
	a.cfg.Observer.Operation(r.Context(), info.op, result, info.name, time.Since(info.start))
}
