package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/leasemcp"
)

// cmdMCP serves the Model Context Protocol on stdin and stdout for one LLM
// agent (docs/agents.md): `leasectl mcp [--url U] [--holder H] [--ttl D]`.
// The session's leases are renewed in the background and released when
// stdin closes or on SIGINT/SIGTERM; logs go to stderr, with one line
// saying why the session ended. A malformed or oversized line from the
// client is answered with a JSON-RPC error and does not end it
// (leasemcp.LineTransport); a read error of stdin or a write error of
// stdout does, with exit status 1.
func cmdMCP(ctx context.Context, e *env, args []string) error {
	fs := e.flags("mcp")
	holder := fs.String("holder", "", "the session's holder identity, unique per session (default $LEASESVC_HOLDER, else hostname-pid)")
	ttl := fs.Duration("ttl", client.DefaultTTL, "with plain renewals: the lease duration of an acquire that names none, renewed every ttl/3 (a session holds its leases at the service's session TTL instead)")
	window := duration(fs, "window", 0, "the session's heartbeat window, 200ms … 60s: a killed leasectl's leases are free within it, and a holding whose heartbeats miss it is lost (default $LEASESVC_WINDOW, else 1s)")
	logLevel := fs.String("log-level", "warn", "stderr log level: debug, info, warn or error")
	plain := fs.Bool("plain-renewals", false, "hold the leases with plain renewals every ttl/3 rather than through a session")
	maxLine := fs.String("max-line", "", "the longest JSON-RPC line read from stdin, a `size` such as 4MiB or 1048576 (64KiB … 1GiB); a longer one is answered with an invalid-request error and skipped (default $LEASESVC_MCP_MAX_LINE, else 4MiB)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	windowSet, ttlSet := false, false
	fs.Visit(func(f *flag.Flag) {
		windowSet = windowSet || f.Name == "window"
		ttlSet = ttlSet || f.Name == "ttl"
	})
	w, err := runWindow(e, fs, *window, windowSet, 0, false)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError("mcp: --log-level %q: want debug, info, warn or error", *logLevel)
	}
	if *ttl < time.Millisecond || *ttl%time.Millisecond != 0 {
		return usageError("mcp: --ttl %v must be a positive whole number of milliseconds", *ttl)
	}
	if *holder == "" {
		*holder = e.getenv("LEASESVC_HOLDER")
	}
	lineLimit, err := mcpMaxLine(*maxLine, e.getenv("LEASESVC_MCP_MAX_LINE"))
	if err != nil {
		return err
	}
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	cfg := leasemcp.Config{
		Holder: *holder, TTL: *ttl,
		Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})),
	}
	// The flags are checked before anything reaches the service.
	if _, err := leasemcp.New(c, cfg); err != nil {
		return usageError("mcp: %v", err)
	}
	logf := func(format string, args ...any) {
		_, _ = fmt.Fprintf(e.stderr, "leasectl mcp: "+format+"\n", args...)
	}
	k, err := openKeeper(ctx, c, keeperConfig(*plain, w, *ttl), logf)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("mcp: %w", err)
	}
	defer k.Close()
	logf("holding leases %s", holdingMode(k))
	if ttlSet && k.Span() != *ttl {
		logf("--ttl %v does not apply: %v the service frees the leases within %v of leasectl's end; give --window, or --plain-renewals to renew every ttl/3", *ttl, k, k.Span())
	}
	cfg.Keeper = k
	srv, err := leasemcp.New(c, cfg)
	if err != nil {
		return usageError("mcp: %v", err)
	}
	// A client that goes away leaves stdout a broken pipe: writing to it
	// must fail (and end the session, which releases the leases) rather
	// than kill leasectl with SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	err = srv.Run(ctx, &leasemcp.LineTransport{In: os.Stdin, Out: os.Stdout, MaxLine: lineLimit, Logger: cfg.Logger})
	switch {
	case err != nil:
		return fmt.Errorf("mcp: session ended, its leases released: %w", err)
	case ctx.Err() != nil:
		logf("stopping on %v: session ended, its leases released", context.Cause(ctx))
	default:
		logf("stdin closed (EOF): session ended, its leases released")
	}
	return nil
}

// mcpMaxLine reads --max-line, else $LEASESVC_MCP_MAX_LINE, else
// leasemcp.DefaultMaxLine: a number of bytes, with an optional unit B,
// KiB, MiB or GiB.
func mcpMaxLine(flagValue, envValue string) (int, error) {
	what, v := "--max-line", flagValue
	if v == "" {
		what, v = "LEASESVC_MCP_MAX_LINE", envValue
	}
	if v == "" {
		return leasemcp.DefaultMaxLine, nil
	}
	num, mult := v, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n > (1<<30)/mult || n*mult < 64<<10 {
		return 0, usageError("mcp: %s %q: want a size from 64KiB to 1GiB, such as 4MiB or 1048576", what, v)
	}
	return int(n * mult), nil
}
