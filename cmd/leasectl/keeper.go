package main

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// keeperConfig is the KeeperConfig run and mcp hold their leases with,
// from their flags: through a session of window unless plain, plain
// renewals asking for ttl otherwise (and when the service offers no
// session). Its DriftMargin is set here, once, so that the flag checks made
// before the Keeper exists (client.FitCancelBefore) use the margin the
// Keeper will.
func keeperConfig(plain bool, window, ttl time.Duration) client.KeeperConfig {
	if plain {
		window = 0
	}
	return client.KeeperConfig{PlainRenewals: plain, Window: window, TTL: ttl, DriftMargin: driftMargin}
}

// driftMargin is the KeeperConfig.DriftMargin of run's and mcp's Keeper
// (keeperConfig), and so the margin of run's flag checks (graceFits).
const driftMargin = client.DefaultDriftMargin

// openKeeper builds the Keeper run and mcp hold their leases with, from
// cfg (keeperConfig): it retries opening the session every second while
// the service is unreachable, and holds by plain renewals when the service
// offers no sessions or refuses one at its session limit. Each retry is a
// line to logf (the Keeper's OnRetry), with a hint about --url after the
// first connection refused; the Keeper logs nothing else, and how it holds
// is Keeper.ModeInfo (holdingLine).
func openKeeper(ctx context.Context, c *client.Client, cfg client.KeeperConfig, logf func(string, ...any)) (*client.Keeper, error) {
	cfg.RetryBackoff = client.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}
	cfg.Logger = nil
	var mu sync.Mutex // OnRetry comes from the Keeper's goroutines
	hinted := false
	cfg.OnRetry = func(r client.KeeperRetry) {
		mu.Lock()
		defer mu.Unlock()
		switch r.Op {
		case client.RetryOpenSession:
			logf("opening a session failed (%v); retrying", r.Err)
		case client.RetryRenew:
			logf("renewing %s (fencing token %d) failed (%v); retrying", r.Lease, r.Token, r.Err)
		default:
			logf("%s failed (%v); retrying", r.Op, r.Err)
		}
		if !hinted && (errors.Is(r.Err, syscall.ECONNREFUSED) || errors.As(r.Err, new(*net.DNSError))) {
			hinted = true
			logf("hint: no leasesvc answers at the URL; point leasectl at it with --url URL or LEASESVC_URL")
		}
	}
	return client.NewKeeper(ctx, c, cfg)
}

// holdingMode says how k holds its leases, for run's and mcp's "holding"
// line: "through a session (window 1s)", "with plain renewals (ttl 30s)"
// when they were asked for, and with the reason otherwise ("…: the
// service's session limit is reached").
func holdingMode(k *client.Keeper) string {
	if m := k.ModeInfo(); m.Mode == client.ModePlain && m.Reason != client.PlainAsked {
		return m.String()
	}
	return k.String()
}
