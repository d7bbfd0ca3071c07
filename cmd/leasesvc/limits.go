package main

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/sweeper"
)

// limits are the settings of docs/contract.md §9: server timeouts, caps on
// what callers hold open, the page-token key, where to listen and the
// shutdown budget.
type limits struct {
	headerTimeout time.Duration // LEASESVC_HEADER_TIMEOUT: headers must arrive within it
	idleTimeout   time.Duration // LEASESVC_IDLE_TIMEOUT: idle keep-alive connections close after it
	shutdown      time.Duration // LEASESVC_SHUTDOWN_TIMEOUT: SIGTERM to exit
	api           httpapi.Limits
	pageTokenKey  []byte        // LEASESVC_PAGE_TOKEN_KEY, decoded; nil: random per process
	listenHost    string        // the host part of the listen address
	maxCandidates int           // LEASESVC_MAX_CANDIDATES: registered candidates per lease
	retainFree    time.Duration // LEASESVC_RETAIN_FREE: the sweeper deletes leases free this long; 0 off
	// recordRetention is LEASESVC_SESSION_RECORD_RETENTION: the sweeper
	// removes a session's record this long after the session ended.
	recordRetention time.Duration
	// memory and memoryPerCaller are LEASESVC_MEMORY_BUDGET and
	// LEASESVC_MEMORY_PER_CALLER, in bytes: the instance's memory budget
	// (docs/contract.md §16), api.Memory, and one caller's share of it.
	memory, memoryPerCaller int64
	// softLimit is the Go runtime's soft memory limit (GOMEMLIMIT, or
	// memory + softLimitMargin), set by applySoftLimit.
	softLimit int64
	edge      edge // where bytes enter (edge.go)
}

// minRetainFree is the shortest LEASESVC_RETAIN_FREE.
const minRetainFree = time.Minute

// minRecordRetention and maxRecordRetention bound
// LEASESVC_SESSION_RECORD_RETENTION: at least the longest window (a
// resume under way as its session ended still finds the record), and at
// most an hour, so that a session's row never stays long.
const (
	minRecordRetention = time.Minute
	maxRecordRetention = time.Hour
)

// Defaults of limits.
const (
	defaultHeaderTimeout = 10 * time.Second
	defaultIdleTimeout   = 2 * time.Minute
	defaultShutdown      = 9 * time.Second // Cloud Run kills 10 s after SIGTERM
	// minStreamRefresh keeps a mistyped LEASESVC_STREAM_REFRESH (1ms) from
	// re-reading a prefix flat out.
	minStreamRefresh = 100 * time.Millisecond
	// defaultMemory is LEASESVC_MEMORY_BUDGET's default, sized for Cloud
	// Run's default instance of 512 MiB (docs/contract.md §16): the
	// process's own ≈ 40 MiB at rest, what it queues and buffers for
	// clients (this budget) and the garbage collector's headroom over it
	// (the Go heap grows to about twice what is live between collections)
	// stay under 512 MiB with room to spare. It holds 900 sessions' fixed
	// cost (64 KiB each, ≈ 56 MiB; 112 KiB when it was sized) with room
	// for a prefix stream of 10,000 leases beside them, and no more: issue 37's target is that
	// no mix of clients grows an instance by 128 MiB, and what the budget
	// holds is most of what they grow it by (192 MiB let all the mixes at
	// once grow it by 151 MiB; 112 MiB, by 88: docs/performance.md).
	defaultMemory = 112 << 20
	// defaultMemoryPerCaller is LEASESVC_MEMORY_PER_CALLER's default: a
	// quarter of the budget, so that no principal takes it all and four
	// busy ones still fit; 100 sessions (11 MiB) fit in it.
	defaultMemoryPerCaller = 28 << 20
	// softLimitMargin is what the Go runtime's soft memory limit allows
	// beyond the budget when GOMEMLIMIT is not set: the process's own heap
	// at rest and the collector's working margin. Without a limit the heap
	// grows to twice what is live between collections; with it (176 MiB
	// at the defaults) the collector runs sooner instead (docs/performance.md,
	// "Clients that do not read"). 64 MiB, not the 128 of issue 37: with
	// the budget spent by every mix at once (issue 45), the heap grew to
	// the limit, 228 MiB above the instance at rest; the budget plus 64 MiB
	// keeps that growth near 128 MiB at the cost of collections only while
	// the budget is nearly spent.
	softLimitMargin = 64 << 20
	// minMemory is the smallest budget and share: one list chunk and a
	// few stream buffers.
	minMemory = 1 << 20
	// maxMemory bounds both settings (1 TiB): larger is a typo.
	maxMemory = 1 << 40
)

// parseLimits reads the limit settings; every error names its variable.
// authMode decides the default listen host: with LEASESVC_AUTH=none the
// service listens on loopback only, unless LEASESVC_LISTEN says otherwise
// or it runs on Cloud Run (K_SERVICE is set), where only Cloud Run's front
// end can reach it.
func parseLimits(getenv func(string) string, authMode string) (limits, error) {
	l := limits{headerTimeout: defaultHeaderTimeout, idleTimeout: defaultIdleTimeout, shutdown: defaultShutdown, maxCandidates: lease.DefaultMaxCandidates, api: httpapi.Limits{
		BodyTimeout: httpapi.DefaultBodyTimeout, StreamsPerCaller: httpapi.DefaultStreamsPerCaller, Streams: httpapi.DefaultStreams,
		StreamLifetime: httpapi.DefaultStreamLifetime, WaitingPerCaller: httpapi.DefaultWaitingPerCaller, Waiting: httpapi.DefaultWaiting,
		ReadyCache: httpapi.DefaultReadyCache, StreamRefresh: httpapi.DefaultStreamRefresh, RefreshPrefixes: httpapi.DefaultRefreshPrefixes,
		ListScanBudget: lease.DefaultScanBudget,
		WriteTimeout:   httpapi.DefaultWriteTimeout, StreamBuffer: httpapi.DefaultStreamBuffer, PageBytes: httpapi.DefaultPageBytes,
	}}
	durs := []struct {
		key string
		dst *time.Duration
	}{
		{"LEASESVC_HEADER_TIMEOUT", &l.headerTimeout}, {"LEASESVC_BODY_TIMEOUT", &l.api.BodyTimeout},
		{"LEASESVC_IDLE_TIMEOUT", &l.idleTimeout}, {"LEASESVC_STREAM_LIFETIME", &l.api.StreamLifetime},
		{"LEASESVC_READY_CACHE", &l.api.ReadyCache}, {"LEASESVC_SHUTDOWN_TIMEOUT", &l.shutdown},
		{"LEASESVC_WRITE_TIMEOUT", &l.api.WriteTimeout},
	}
	for _, d := range durs {
		if v := getenv(d.key); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				return l, fmt.Errorf("%s=%q: want a positive duration such as 10s or 2m", d.key, v)
			}
			*d.dst = x
		}
	}
	if v := getenv("LEASESVC_STREAM_REFRESH"); v != "" {
		x, err := time.ParseDuration(v)
		if err != nil || x < 0 || (x > 0 && x < minStreamRefresh) {
			return l, fmt.Errorf("LEASESVC_STREAM_REFRESH=%q: want 0 (off) or a duration of at least %v, such as 1s or 5s", v, minStreamRefresh)
		}
		l.api.StreamRefresh = x
		if x == 0 {
			l.api.StreamRefresh = httpapi.StreamRefreshOff
		}
	}
	ints := []struct {
		key string
		dst *int
	}{
		{"LEASESVC_MAX_STREAMS_PER_CALLER", &l.api.StreamsPerCaller}, {"LEASESVC_MAX_STREAMS", &l.api.Streams},
		{"LEASESVC_MAX_WAITING_PER_CALLER", &l.api.WaitingPerCaller}, {"LEASESVC_MAX_WAITING", &l.api.Waiting},
		{"LEASESVC_MAX_CANDIDATES", &l.maxCandidates}, {"LEASESVC_MAX_REFRESH_PREFIXES", &l.api.RefreshPrefixes},
		{"LEASESVC_LIST_SCAN_BUDGET", &l.api.ListScanBudget},
	}
	for _, n := range ints {
		if v := getenv(n.key); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < 1 {
				return l, fmt.Errorf("%s=%q: want an integer ≥ 1", n.key, v)
			}
			*n.dst = x
		}
	}
	if v := getenv("LEASESVC_RETAIN_FREE"); v != "" && v != "off" {
		x, err := time.ParseDuration(v)
		if err != nil || x < minRetainFree {
			return l, fmt.Errorf("LEASESVC_RETAIN_FREE=%q: want off or a duration of at least %v, such as 720h", v, minRetainFree)
		}
		l.retainFree = x
	}
	l.recordRetention = sweeper.DefaultRecordRetention
	if v := getenv("LEASESVC_SESSION_RECORD_RETENTION"); v != "" {
		x, err := time.ParseDuration(v)
		if err != nil || x < minRecordRetention || x > maxRecordRetention {
			return l, fmt.Errorf("LEASESVC_SESSION_RECORD_RETENTION=%q: want a duration from %v to %v, such as 1m", v, minRecordRetention, maxRecordRetention)
		}
		l.recordRetention = x
	}
	sizes := []struct {
		key      string
		dst      *int
		min, max int
	}{
		{"LEASESVC_STREAM_BUFFER", &l.api.StreamBuffer, 4 << 10, 64 << 20},
		{"LEASESVC_MAX_PAGE_BYTES", &l.api.PageBytes, 64 << 10, httpapi.MaxPageBytes},
	}
	for _, n := range sizes {
		if v := getenv(n.key); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < n.min || x > n.max {
				return l, fmt.Errorf("%s=%q: want a number of bytes from %d to %d", n.key, v, n.min, n.max)
			}
			*n.dst = x
		}
	}
	if err := l.parseMemory(getenv); err != nil {
		return l, err
	}
	var err error
	if l.edge, err = parseEdge(getenv); err != nil {
		return l, err
	}
	if v := getenv("LEASESVC_PAGE_TOKEN_KEY"); v != "" {
		key, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(key) != httpapi.PageTokenKeySize {
			return l, fmt.Errorf("LEASESVC_PAGE_TOKEN_KEY: want %d random bytes in standard base64, as openssl rand -base64 32 prints them", httpapi.PageTokenKeySize)
		}
		l.pageTokenKey = key
	}
	switch v := getenv("LEASESVC_LISTEN"); {
	case v != "":
		if ip := net.ParseIP(v); ip == nil && v != "localhost" {
			return l, fmt.Errorf("LEASESVC_LISTEN=%q: want an IP address to listen on: 127.0.0.1, 0.0.0.0, :: or another", v)
		}
		l.listenHost = v
	case authMode == "none" && getenv("K_SERVICE") == "":
		l.listenHost = "127.0.0.1"
	}
	return l, nil
}

// logAttrs are the limits as the start-up line shows them.
func (l limits) logAttrs() []any {
	return []any{slog.Group("limits",
		"headerTimeout", l.headerTimeout.String(), "bodyTimeout", l.api.BodyTimeout.String(), "idleTimeout", l.idleTimeout.String(),
		"streamsPerCaller", l.api.StreamsPerCaller, "streams", l.api.Streams, "streamLifetime", l.api.StreamLifetime.String(),
		"streamRefresh", max(l.api.StreamRefresh, 0).String(), "refreshPrefixes", l.api.RefreshPrefixes,
		"writeTimeout", l.api.WriteTimeout.String(), "streamBuffer", l.api.StreamBuffer, "pageBytes", l.api.PageBytes,
		"waitingPerCaller", l.api.WaitingPerCaller, "waiting", l.api.Waiting, "candidates", l.maxCandidates, "readyCache", l.api.ReadyCache.String(), "listScanBudget", l.api.ListScanBudget,
		"shutdown", l.shutdown.String(), "sharedPageTokenKey", l.pageTokenKey != nil, "retainFree", l.retainFree.String(),
		"memoryBudget", l.memory, "memoryPerCaller", l.memoryPerCaller, "goMemLimit", l.softLimit)}
}

// applySoftLimit sets the Go runtime's soft memory limit to the budget
// plus softLimitMargin, unless GOMEMLIMIT set one (the runtime read it at
// start), and records the limit in force.
func (l *limits) applySoftLimit(getenv func(string) string) {
	if getenv("GOMEMLIMIT") != "" {
		l.softLimit = debug.SetMemoryLimit(-1) // -1 reads it
		return
	}
	l.softLimit = math.MaxInt64
	if l.memory <= math.MaxInt64-softLimitMargin {
		l.softLimit = l.memory + softLimitMargin
	}
	debug.SetMemoryLimit(l.softLimit)
}

// parseMemory reads LEASESVC_MEMORY_BUDGET and LEASESVC_MEMORY_PER_CALLER
// (bytes) and makes the budget every client's queued and buffered bytes
// are charged to (docs/contract.md §16).
func (l *limits) parseMemory(getenv func(string) string) error {
	l.memory, l.memoryPerCaller = defaultMemory, defaultMemoryPerCaller
	for _, n := range []struct {
		key string
		dst *int64
	}{{"LEASESVC_MEMORY_BUDGET", &l.memory}, {"LEASESVC_MEMORY_PER_CALLER", &l.memoryPerCaller}} {
		if v := getenv(n.key); v != "" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil || x < minMemory || x > maxMemory {
				return fmt.Errorf("%s=%q: want a number of bytes from %d to %d", n.key, v, minMemory, int64(maxMemory))
			}
			*n.dst = x
		}
	}
	if l.memoryPerCaller > l.memory {
		if getenv("LEASESVC_MEMORY_PER_CALLER") != "" {
			return fmt.Errorf("LEASESVC_MEMORY_PER_CALLER=%d: want at most LEASESVC_MEMORY_BUDGET (%d)", l.memoryPerCaller, l.memory)
		}
		l.memoryPerCaller = l.memory // a small budget set alone: one caller may use it all
	}
	b, err := membudget.New(l.memory, l.memoryPerCaller)
	if err != nil {
		return fmt.Errorf("LEASESVC_MEMORY_BUDGET: %w", err)
	}
	l.api.Memory = b
	return nil
}

// loopbackListen reports whether the service listens on loopback only.
func loopbackListen(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
