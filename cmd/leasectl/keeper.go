package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// openKeeper builds the Keeper run and mcp hold their leases with, from
// their flags (cfg): through a session of cfg.Window unless
// --plain-renewals, retrying while the service is unreachable, and with
// plain renewals when the service offers no sessions or refuses one at its
// session limit. The Keeper's log lines go to logf, with a hint about
// --url after the first connection refused.
func openKeeper(ctx context.Context, c *client.Client, cfg client.KeeperConfig, logf func(string, ...any)) (*client.Keeper, error) {
	if cfg.PlainRenewals {
		cfg.Window = 0
	}
	cfg.RetryBackoff = client.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}
	cfg.Logger = slog.New(&logfHandler{logf: logf})
	return client.NewKeeper(ctx, c, cfg)
}

// logfHandler turns a Keeper's log records into leasectl's stderr lines.
type logfHandler struct {
	logf   func(string, ...any)
	hinted bool
}

func (h *logfHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *logfHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logfHandler) WithGroup(string) slog.Handler            { return h }

// Handle writes r's message without the SDK's prefix, and its error.
func (h *logfHandler) Handle(_ context.Context, r slog.Record) error {
	msg := strings.TrimPrefix(r.Message, "leasesvc keeper: ")
	if strings.HasPrefix(msg, "holding ") || msg == "plain renewals" {
		return nil // run and mcp say how they hold, with the lease's name
	}
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok {
			err = e
		}
		return true
	})
	if err == nil {
		h.logf("%s", msg)
		return nil
	}
	h.logf("%s (%v); retrying", msg, err)
	if !h.hinted && (errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, new(*net.DNSError))) {
		h.hinted = true
		h.logf("hint: no leasesvc answers at the URL; point leasectl at it with --url URL or LEASESVC_URL")
	}
	return nil
}
