// Package httpapi serves the lease API of docs/contract.md §4 over HTTP: JSON bodies in
// lowerCamelCase, Google AIP-136 custom methods (POST /v1/leases/{name}:acquire),
// and RFC 9457 problem+json errors with a stable code member.
//
// No input, however malformed, produces a 500 or a panic, and a refused
// request changes nothing: every request is decoded and checked before the
// lease.Manager is called, and the Manager checks again before it writes.
package httpapi

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/internal/overload"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
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
	// Limits bound what one caller and this instance may hold open
	// (docs/contract.md §9); zero fields mean their defaults.
	Limits Limits
	// Overload, if set, is the instance's overload manager
	// (docs/contract.md §16): past its soft threshold new work is refused
	// 503 and waits, streams and, past the hard one, the heaviest callers'
	// sockets are shed through it.
	Overload *overload.Manager
	// Internal names the service's own leases (its sweeper's election,
	// docs/contract.md §15): list and the prefix stream leave them out; get
	// and the single-lease stream still show them to a caller who may read
	// them. An entry ending in "." names every lease under that prefix.
	// The sessions' own records (names beginning lease.SessionRecordPrefix,
	// §14) are always internal, and no route but an acquire (refused 400)
	// finds them.
	Internal []string
	// Proofs, if not nil, signs a proof into every answer that starts or
	// restarts a holding and serves GET /.well-known/jwks.json
	// (docs/contract.md §17); nil answers without proofs and the route 404.
	Proofs Proofs
	// Sessions serves GET /v1/sessions:connect (docs/contract.md §14); nil
	// turns sessions off (the route answers 404, and clients fall back to
	// plain renewals).
	Sessions *session.Registry
	// AllowedOrigins lists the origins (scheme://host[:port]) besides the
	// service's own whose requests the lease API serves; a request whose
	// Origin header names any other is 403 origin_not_allowed. Nil allows
	// only the service's own origin. The service answers no CORS
	// preflight: this lets through a proxy or tool that sets Origin, not
	// a browser page's JSON requests.
	AllowedOrigins []string
	// AllowedHosts lists the Host names besides loopback ones (localhost,
	// *.localhost, 127.0.0.0/8, ::1) that the lease API answers while
	// authentication is off; "*" allows every Host. Another Host is 403
	// host_not_allowed, so that DNS rebinding reaches nothing. Unused
	// with an Authenticator.
	AllowedHosts []string
	// PageTokenKey seals list page tokens (AES-256-GCM): 32 bytes. Nil
	// means a random key made by New, so a token is good only on the
	// instance that made it; instances behind one load balancer must share
	// a key.
	PageTokenKey []byte
}

// Limits are the caps of docs/contract.md §9. The zero value of every field
// means its default.
type Limits struct {
	// BodyTimeout bounds the time to read a request body, from the moment
	// the handler sees the request; a body that has not arrived by then is
	// answered 408 and its connection closed. Default 10s.
	BodyTimeout time.Duration
	// StreamsPerCaller and Streams cap the open :watch streams of one
	// caller (principal; client address without authentication) and of
	// this instance. Defaults 100 and 10,000.
	StreamsPerCaller, Streams int
	// StreamLifetime ends a :watch stream cleanly after this long; the
	// client reconnects. Default 1h.
	StreamLifetime time.Duration
	// WaitingPerCaller and Waiting cap the waiting acquires (waitMs > 0)
	// of one caller and of this instance. Defaults 100 and 10,000.
	WaitingPerCaller, Waiting int
	// ReadyCache is how long a /readyz answer is reused. Default 1s.
	ReadyCache time.Duration
	// ListScanBudget is how many leases the caller may not read one list
	// page passes over, at most, before it ends early with a next-page
	// token (docs/security.md). Default lease.DefaultScanBudget.
	ListScanBudget int
	// StreamRefresh is how often the instance re-reads the leases under a
	// prefix while a prefix stream asked for refresh events (one read of
	// the prefix per interval, shared by its streams). Default 1s; negative
	// turns refresh events off.
	StreamRefresh time.Duration
	// RefreshPrefixes caps the prefixes the instance re-reads for refresh
	// events at once (each costs a read of every lease under it per
	// StreamRefresh); a stream asking for refresh of another prefix is
	// answered 429. Default 64.
	RefreshPrefixes int
	// WriteTimeout bounds the time to write a response, from its first
	// byte, and each event of a :watch stream; a client that takes no more
	// than that loses its connection. It is set per response, never on the
	// server, so streams and waiting acquires can last. Default 30s.
	WriteTimeout time.Duration
	// StreamBuffer bounds the bytes a :watch stream queues for a client
	// that reads slower than its events come; a stream whose client falls
	// further behind is closed with an `overflow` event. Default 256 KiB
	// (the kernel's socket buffer holds more before this queue fills).
	StreamBuffer int
	// PageBytes bounds the encoded size of a list page: the page ends
	// early, with a nextPageToken, before it would pass it; a page always
	// holds at least one lease. Default 4 MiB, at most MaxPageBytes.
	PageBytes int
	// Memory is the instance's memory budget (docs/contract.md §16): the
	// bytes queued or buffered for clients are charged to it, per caller.
	// Nil: no budget beyond each stream's and page's own bound.
	Memory *membudget.Budget
}

// Defaults of Limits.
const (
	DefaultBodyTimeout      = 10 * time.Second
	DefaultStreamsPerCaller = 100
	DefaultStreams          = 10000
	DefaultStreamLifetime   = time.Hour
	DefaultWaitingPerCaller = 100
	DefaultWaiting          = 10000
	DefaultReadyCache       = time.Second
	DefaultRefreshPrefixes  = 64
	DefaultWriteTimeout     = 30 * time.Second
	DefaultStreamBuffer     = 256 << 10
	DefaultPageBytes        = 4 << 20
)

// StreamRefreshOff, as Limits.StreamRefresh, turns refresh events off.
const StreamRefreshOff time.Duration = -1

// MaxPageBytes is the largest Limits.PageBytes: clients read answers of up
// to twice as much (client.MaxAnswerBytes), so that any page, even one
// whose single lease is larger than the bound, reaches them whole.
const MaxPageBytes = 32 << 20

// withDefaults fills in the zero fields and checks the others.
func (l Limits) withDefaults() (Limits, error) {
	switch {
	case l.StreamRefresh == 0:
		l.StreamRefresh = DefaultStreamRefresh
	case l.StreamRefresh < 0:
		l.StreamRefresh = StreamRefreshOff
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"BodyTimeout", &l.BodyTimeout, DefaultBodyTimeout}, {"StreamLifetime", &l.StreamLifetime, DefaultStreamLifetime}, {"ReadyCache", &l.ReadyCache, DefaultReadyCache},
		{"WriteTimeout", &l.WriteTimeout, DefaultWriteTimeout}} {
		if *f.v < 0 {
			return l, fmt.Errorf("httpapi: Config.Limits.%s must not be negative", f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"StreamsPerCaller", &l.StreamsPerCaller, DefaultStreamsPerCaller}, {"Streams", &l.Streams, DefaultStreams},
		{"WaitingPerCaller", &l.WaitingPerCaller, DefaultWaitingPerCaller}, {"Waiting", &l.Waiting, DefaultWaiting},
		{"RefreshPrefixes", &l.RefreshPrefixes, DefaultRefreshPrefixes}, {"ListScanBudget", &l.ListScanBudget, lease.DefaultScanBudget},
		{"StreamBuffer", &l.StreamBuffer, DefaultStreamBuffer}, {"PageBytes", &l.PageBytes, DefaultPageBytes}} {
		if *f.v < 0 {
			return l, fmt.Errorf("httpapi: Config.Limits.%s must not be negative", f.name)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if l.PageBytes > MaxPageBytes {
		return l, fmt.Errorf("httpapi: Config.Limits.PageBytes must be at most %d", MaxPageBytes)
	}
	return l, nil
}

// Config's defaults.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultReadyTimeout   = 2 * time.Second
	DefaultHeartbeat      = 15 * time.Second
)

// MaxBodyBytes is the largest request body accepted (docs/contract.md §4); larger is 413.
const MaxBodyBytes = 64 << 10

// api holds what the handlers share.
type api struct {
	m       *lease.Manager
	cfg     Config
	log     *slog.Logger
	stopCtx context.Context         // done after Handler.CloseStreams, with cause errShuttingDown
	stopNow context.CancelCauseFunc // ends stopCtx
	streams *slots                  // open :watch streams
	waiting *slots                  // waiting acquires
	tokens  cipher.AEAD             // seals page tokens
	sources *sources                // which origins and hosts the API serves
	ready   readyCache
	refresh *refreshers // the paced re-reads behind refresh events
}

// errShuttingDown ends the waiting acquires of a handler whose streams are
// closed: the instance is shutting down.
var errShuttingDown = errors.New("the service is shutting down")

// Handler is the HTTP handler of the lease API.
type Handler struct {
	http.Handler
	api *api
}

// CloseStreams ends every :watch stream and answers every waiting acquire
// at once with 503 unavailable and Retry-After: 1, so that the client
// retries on another instance, as a server shutting down must
// (http.Server.Shutdown waits for active requests, it does not end them).
// Requests that arrive later get the same answer instead of waiting or
// streaming. Call it on SIGTERM, before http.Server.Shutdown.
func (h *Handler) CloseStreams() { h.api.stopNow(errShuttingDown) }

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
	var err error
	if cfg.Limits, err = cfg.Limits.withDefaults(); err != nil {
		return nil, err
	}
	aead, err := pageTokenAEAD(cfg.PageTokenKey)
	if err != nil {
		return nil, err
	}
	src, err := newSources(cfg.AllowedOrigins, cfg.AllowedHosts, cfg.Authenticator == nil)
	if err != nil {
		return nil, err
	}
	a := &api{m: m, cfg: cfg, log: cfg.Logger, tokens: aead, sources: src,
		streams: newSlots(cfg.Limits.StreamsPerCaller, cfg.Limits.Streams),
		waiting: newSlots(cfg.Limits.WaitingPerCaller, cfg.Limits.Waiting)}
	a.stopCtx, a.stopNow = context.WithCancelCause(context.Background())
	a.refresh = &refreshers{m: m, interval: max(cfg.Limits.StreamRefresh, 0), max: cfg.Limits.RefreshPrefixes, timeout: cfg.RequestTimeout, stopCtx: a.stopCtx,
		by: map[string]*refresher{}, onError: func(prefix string, err error) {
			a.log.Warn("refresh events: reading the leases failed", "prefix", prefix, "err", err)
		}}
	r := chi.NewRouter()
	a.routes(r)
	return &Handler{Handler: a.observe(a.guardSources(r)), api: a}, nil
}
