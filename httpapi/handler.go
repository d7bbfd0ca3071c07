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
	"time"

	"github.com/go-chi/chi/v5"

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
}

// DefaultRequestTimeout and DefaultReadyTimeout are Config's defaults.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultReadyTimeout   = 2 * time.Second
)

// MaxBodyBytes is the largest request body accepted (SPEC §4); larger is 413.
const MaxBodyBytes = 64 << 10

// api holds what the handlers share.
type api struct {
	m   *lease.Manager
	cfg Config
	log *slog.Logger
}

// New returns the HTTP handler of the lease API over m.
func New(m *lease.Manager, cfg Config) (http.Handler, error) {
	if m == nil {
		return nil, errors.New("httpapi: New: Manager is nil")
	}
	if cfg.RequestTimeout < 0 {
		return nil, errors.New("httpapi: Config.RequestTimeout must not be negative")
	}
	if cfg.ReadyTimeout < 0 {
		return nil, errors.New("httpapi: Config.ReadyTimeout must not be negative")
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
	a := &api{m: m, cfg: cfg, log: cfg.Logger}
	r := chi.NewRouter()
	a.routes(r)
	return r, nil
}
