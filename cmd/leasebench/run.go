package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// bench is what every scenario gets.
type bench struct {
	cfg    config
	svc    *service
	direct direct // nil with the memory backend
	log    io.Writer

	mu   sync.Mutex
	last time.Time // of the last progress line
}

// progress writes a progress line to stderr, at most one a second unless
// force.
func (b *bench) progress(force bool, format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !force && time.Since(b.last) < time.Second {
		return
	}
	b.last = time.Now()
	fmt.Fprintf(b.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// second returns the second URL, or the first when only one is given.
func (b *bench) second() string { return b.cfg.urls[len(b.cfg.urls)-1] }

// scenario runs one scenario and returns its rows; with an error, the rows
// it has (possibly none) are still reported.
type scenario func(ctx context.Context, b *bench) ([]row, error)

var scenarios = map[string]scenario{
	"latency":    latency,
	"throughput": throughput,
	"contention": contention,
	"handoff":    handoff,
	"takeover":   takeover,
	"succession": succession,
	"events":     events,

	"sessiontakeover": sessionTakeover,
	"sessionwrites":   sessionWrites,
	"sessionfailover": sessionFailover,
	"sessionscale":    sessionScale,
	"proofs":          proofs,
}

// run parses the configuration, runs the scenarios and writes the report.
// A scenario that fails is reported as such, the others still run, and run
// returns the failures after writing the report.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if cfg.backend == "memory" && len(cfg.urls) > 1 {
		fmt.Fprintln(stderr, "leasebench: warning: memory-backend instances share nothing; handoff, takeover and events across two of them never complete. Using the first URL only.")
		cfg.urls = cfg.urls[:1]
	}
	b := &bench{cfg: cfg, svc: newService(cfg.timeout), log: stderr}
	defer b.svc.hc.CloseIdleConnections()
	if b.direct, err = openDirect(ctx, cfg); err != nil {
		return err
	}
	if b.direct != nil {
		defer func() {
			if cerr := b.direct.close(); cerr != nil {
				fmt.Fprintln(stderr, "leasebench:", cerr)
			}
		}()
	}
	for _, u := range cfg.urls {
		if err := b.svc.healthz(ctx, u); err != nil {
			return fmt.Errorf("service %s: %w", u, err)
		}
	}
	rep := report{Started: time.Now(), Machine: thisMachine(), Settings: map[string]any{
		"urls": cfg.urls, "backend": cfg.backend, "scenarios": cfg.scenarios, "n": cfg.n, "samples": cfg.samples,
		"agents": cfg.agents, "ttl": cfg.ttl.String(), "duration": cfg.duration.String(), "contenders": cfg.contenders,
		"contenderPauses": fmtDurations(cfg.pauses), "renewEvery": cfg.renewEvery.String(), "takeoverTTL": cfg.takeoverTTL.String(),
		"successionTTL": cfg.successionTTL.String(), "successionRenew": cfg.successionRenew.String(), "pubsubTopic": cfg.topic, "prefix": cfg.prefix,
	}}
	if slices.ContainsFunc(cfg.scenarios, func(s string) bool { return strings.HasPrefix(s, "session") }) {
		for k, v := range map[string]any{"sessionWindows": fmtDurations(cfg.sessionWindows), "sessionCompareTTLs": fmtDurations(cfg.compareTTLs),
			"slowSamples": cfg.slowSamples, "writeSessions": cfg.writeSessions, "writeLeases": cfg.writeLeases, "writeDuration": cfg.writeDuration.String(),
			"failoverRuns": cfg.failoverRuns, "failoverSessions": cfg.failoverSessions, "failoverLeases": cfg.failoverLeases,
			"scaleRuns": fmt.Sprint(cfg.scaleRuns), "scaleDuration": cfg.scaleDuration.String(), "scaleWindow": cfg.scaleWindow.String()} {
			rep.Settings[k] = v
		}
	}
	var failed []error
	for _, name := range cfg.scenarios {
		if err := ctx.Err(); err != nil {
			failed = append(failed, fmt.Errorf("scenario %s not run: %w", name, err))
			continue
		}
		b.progress(true, "%s: starting", name)
		start := time.Now()
		rows, err := scenarios[name](ctx, b)
		rep.Results = append(rep.Results, rows...)
		if err != nil { // report it with the others' results and go on
			b.progress(true, "%s: failed after %v: %v", name, time.Since(start).Round(time.Millisecond), err)
			failed = append(failed, fmt.Errorf("scenario %s: %w", name, err))
			rep.Results = append(rep.Results, row{Scenario: name, Metric: "failed", Note: err.Error()})
			continue
		}
		b.progress(true, "%s: done in %v", name, time.Since(start).Round(time.Millisecond))
	}
	rep.Machine.LoadAfter = loadAvg()
	if err := rep.write(stdout, cfg.json); err != nil {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

func fmtDurations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
