// Package httpapi serves the lease API of SPEC §4 over HTTP: JSON bodies in
// lowerCamelCase, Google AIP-136 custom methods (POST /v1/leases/{name}:acquire),
// and RFC 9457 problem+json errors with a stable code member.
//
// No input, however malformed, produces a 500 or a panic, and a refused
// request changes nothing: every request is decoded and checked before the
// lease.Manager is called, and the Manager checks again before it writes.
package httpapi

import (
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// Config configures the handler. The zero value of every field means its
// default.
type Config struct {
	// Logger receives errors the handler could not answer with a 4xx.
	// Default slog.Default().
	Logger *slog.Logger
	// RequestTimeout bounds the backend work of one request, not counting
	// the time an acquire spends waiting (waitMs). Default 10s.
	RequestTimeout time.Duration
	// ReadyTimeout bounds the backend check of /readyz. Default 2s.
	ReadyTimeout time.Duration
	// Events delivers the leadership events that :watch streams: this
	// instance's changes and those Pub/Sub brings from others. Nil means
	// watchers learn of changes from their expiry timers only.
	Events *hub.Hub
	// Heartbeat is the interval of the comments a :watch stream sends so
	// that proxies keep it open. Default 15s.
	Heartbeat time.Duration
	// Observer, if set, receives every lease operation, for metrics.
	Observer Observer
	// Authenticator identifies the caller of every lease operation; nil
	// turns authentication off (every caller is the anonymous principal "").
	Authenticator auth.Authenticator
	// Policy grants principals verbs on lease-name prefixes; nil allows
	// everything.
	Policy *auth.Policy
	// Limiter limits the request rate per principal (per client address
	// when authentication is off); nil means no limit.
	Limiter *auth.Limiter
	// Audit receives a line per request refused for authentication or
	// authorization; nil writes none.
	Audit *audit.Log
	// TracerProvider and MeterProvider instrument HTTP requests. Default
	// the otel globals.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Config's defaults.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultReadyTimeout   = 2 * time.Second
	DefaultHeartbeat      = 15 * time.Second
)

// MaxBodyBytes is the largest request body accepted (SPEC §4); larger is 413.
const MaxBodyBytes = 64 << 10

// api holds what the handlers share.
type api struct {
	m    *lease.Manager
	cfg  Config
	log  *slog.Logger
	stop chan struct{} // closed by Handler.CloseStreams
}

// Handler is the HTTP handler of the lease API.
type Handler struct {
	http.Handler
	api  *api
	once sync.Once
}

// CloseStreams ends every :watch stream, as a server shutting down must
// (http.Server.Shutdown does not end active streams); register it with
// http.Server.RegisterOnShutdown.
func (h *Handler) CloseStreams() { h.once.Do(func() { close(h.api.stop) }) }

// New returns the HTTP handler of the lease API over m.
func New(m *lease.Manager, cfg Config) (*Handler, error) {
	if m == nil {
		return nil, errors.New("httpapi: New: Manager is nil")
	}
	if cfg.RequestTimeout < 0 {
		return nil, errors.New("httpapi: Config.RequestTimeout must not be negative")
	}
	if cfg.ReadyTimeout < 0 {
		return nil, errors.New("httpapi: Config.ReadyTimeout must not be negative")
	}
	if cfg.Heartbeat < 0 {
		return nil, errors.New("httpapi: Config.Heartbeat must not be negative")
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = otel.GetMeterProvider()
	}
	if cfg.Events == nil {
		cfg.Events = hub.New()
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &api{m: m, cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
	r := chi.NewRouter()
	a.routes(r)
	return &Handler{Handler: a.observe(r), api: a}, nil
}
