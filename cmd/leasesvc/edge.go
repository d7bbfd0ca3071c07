package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/connlimit"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/internal/overload"
	"github.com/leasesvc/leasesvc/telemetry"
	"go.opentelemetry.io/otel/metric"
)

// edge are the limits where bytes enter, before any HTTP work
// (docs/contract.md §16): header bytes, connections, and the overload
// manager's thresholds.
type edge struct {
	maxHeaderBytes  int   // LEASESVC_MAX_HEADER_BYTES: http.Server.MaxHeaderBytes
	maxConns        int   // LEASESVC_MAX_CONNECTIONS: open at once, 0 off
	maxConnsPerAddr int   // LEASESVC_MAX_CONNECTIONS_PER_ADDRESS: from one IP address, 0 off
	overloadSoft    int64 // LEASESVC_OVERLOAD_SOFT: bytes in use; 0 off (with hard)
	overloadHard    int64 // LEASESVC_OVERLOAD_HARD
}

// Defaults of edge.
const (
	// defaultMaxHeaderBytes holds a Google ID token (≈ 1 KiB), cookies and
	// tracing headers many times over; Go's own default is 1 MiB, which
	// 1,000 held-open streams turn into a gigabyte.
	defaultMaxHeaderBytes = 64 << 10
	// defaultMaxConns is above the 1,000 requests Cloud Run sends an
	// instance at once (900 session sockets and REST calls) with room for
	// idle keep-alive connections; at 64 KiB of headers each, what they
	// can hold before a handler runs stays under 96 MiB.
	defaultMaxConns = 1500
	// defaultMaxConnsPerAddr bounds one client host off Cloud Run (where
	// every connection comes from Google's front end and the limit is off):
	// 900 sessions and a hundred REST clients of one host still fit.
	defaultMaxConnsPerAddr = 1024
)

// parseEdge reads the edge settings; every error names its variable.
func parseEdge(getenv func(string) string) (edge, error) {
	e := edge{maxHeaderBytes: defaultMaxHeaderBytes, maxConns: defaultMaxConns, maxConnsPerAddr: defaultMaxConnsPerAddr,
		overloadSoft: overload.DefaultSoft, overloadHard: overload.DefaultHard}
	if getenv("K_SERVICE") != "" {
		e.maxConnsPerAddr = 0 // every connection is the front end's
	}
	// Each name is read by a literal getenv call, so that the terraform
	// module's test sees what the service reads.
	ints := []struct {
		key, v   string
		dst      *int
		min, max int
	}{
		{"LEASESVC_MAX_HEADER_BYTES", getenv("LEASESVC_MAX_HEADER_BYTES"), &e.maxHeaderBytes, 4 << 10, 1 << 20},
		{"LEASESVC_MAX_CONNECTIONS", getenv("LEASESVC_MAX_CONNECTIONS"), &e.maxConns, 0, 1 << 20},
		{"LEASESVC_MAX_CONNECTIONS_PER_ADDRESS", getenv("LEASESVC_MAX_CONNECTIONS_PER_ADDRESS"), &e.maxConnsPerAddr, 0, 1 << 20},
	}
	for _, n := range ints {
		if v := n.v; v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < n.min || x > n.max {
				return e, fmt.Errorf("%s=%q: want an integer from %d to %d", n.key, v, n.min, n.max)
			}
			*n.dst = x
		}
	}
	for _, n := range []struct {
		key, v string
		dst    *int64
	}{{"LEASESVC_OVERLOAD_SOFT", getenv("LEASESVC_OVERLOAD_SOFT"), &e.overloadSoft}, {"LEASESVC_OVERLOAD_HARD", getenv("LEASESVC_OVERLOAD_HARD"), &e.overloadHard}} {
		if v := n.v; v != "" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x < 0 || x > maxMemory {
				return e, fmt.Errorf("%s=%q: want a number of bytes, 0 (off) to %d", n.key, v, int64(maxMemory))
			}
			*n.dst = x
		}
	}
	switch off := e.overloadSoft == 0 || e.overloadHard == 0; {
	case off && e.overloadSoft+e.overloadHard != 0:
		return e, fmt.Errorf("LEASESVC_OVERLOAD_SOFT=%d, LEASESVC_OVERLOAD_HARD=%d: set both to 0 to turn the overload manager off", e.overloadSoft, e.overloadHard)
	case !off && e.overloadSoft >= e.overloadHard:
		return e, fmt.Errorf("LEASESVC_OVERLOAD_SOFT=%d must be below LEASESVC_OVERLOAD_HARD=%d", e.overloadSoft, e.overloadHard)
	}
	return e, nil
}

// logAttrs are the edge settings as the start-up line shows them.
func (e edge) logAttrs() slog.Attr {
	return slog.Group("edge", "maxHeaderBytes", e.maxHeaderBytes, "maxConnections", e.maxConns,
		"maxConnectionsPerAddress", e.maxConnsPerAddr, "overloadSoft", e.overloadSoft, "overloadHard", e.overloadHard)
}

// listen wraps ln with the connection limits; refusals are logged.
func (e edge) listen(ln net.Listener, log *slog.Logger) net.Listener {
	if e.maxConns == 0 && e.maxConnsPerAddr == 0 {
		return ln
	}
	return connlimit.New(ln, connlimit.Config{Total: e.maxConns, PerAddress: e.maxConnsPerAddr, OnRefuse: func(addr, limit string) {
		log.Warn("connection refused: too many open", "limit", limit, "addr", addr)
	}})
}

// newOverload starts the overload manager (nil when off): level changes
// are logged, and every action is an audit line and a metric.
func (e edge) newOverload(ctx context.Context, budget *membudget.Budget, log *slog.Logger, aud *audit.Log, mp metric.MeterProvider) (*overload.Manager, func(), error) {
	if e.overloadSoft == 0 {
		return nil, func() {}, nil
	}
	var mets *telemetry.Overload
	m, err := overload.New(overload.Config{Soft: e.overloadSoft, Hard: e.overloadHard, Heaviest: budget.Heaviest,
		OnLevel: func(from, to overload.Level, inUse int64) {
			log.Warn("overload: level changed", "from", from.String(), "to", to.String(), "inUseBytes", inUse)
			aud.Overload(ctx, "overload_level", to.String(), "", fmt.Sprintf("from %s at %d bytes in use", from, inUse))
			mets.Action(ctx, "level", to.String())
		},
		OnShed: func(at overload.Level, caller, kind string, inUse int64) {
			aud.Overload(ctx, "overload_shed", kind, caller, fmt.Sprintf("%s at %d bytes in use", at, inUse))
			mets.Action(ctx, "shed", kind)
		},
		OnRefuse: func(op string) { mets.Action(ctx, "refuse", op) },
	})
	if err != nil {
		return nil, nil, err
	}
	mets, err = telemetry.NewOverload(mp, m.InUseBytes, func() int64 { return int64(m.Level()) })
	if err != nil {
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); m.Run(runCtx) }()
	return m, func() { stop(); <-done; _ = mets.Close() }, nil
}
