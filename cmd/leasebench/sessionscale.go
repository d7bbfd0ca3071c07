package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
	"github.com/leasesvc/leasesvc/internal/svcproc"
)

// sessionScale runs, for each of -scale-runs, that many sessions of one
// lease each at its window against one instance it starts (from
// -leasesvc) for -scale-duration, and reports how many expired (a lease
// lost, an agent's deadline passed, a lease not held at the end), the
// instance's CPU time per 1,000 heartbeats (/proc/PID/stat) and its memory
// per session (VmRSS after the sessions opened, less before).
func sessionScale(ctx context.Context, b *bench) ([]row, error) {
	var rows []row
	for _, run := range b.cfg.scaleRuns {
		r, err := scaleRun(ctx, b, run.sessions, run.window)
		rows = append(rows, r...)
		if err != nil {
			return rows, fmt.Errorf("%v: %w", run, err)
		}
	}
	return rows, nil
}

// scaleSettings are the instance settings a run of n sessions from one
// client address needs beyond the defaults, which are sized for many
// callers: every session comes from this process, so the per-caller and
// per-address limits are raised to hold them all (and the instance-wide
// ones where n passes them). The memory budget itself is not raised: the
// sessions' fixed cost must fit in it, as it must for real clients.
func scaleSettings(n int, getenv func(string) string) []string {
	limit := strconv.Itoa(n + 10)
	conns := strconv.Itoa(max(n+64, 1500))
	budget := getenv("LEASESVC_MEMORY_BUDGET")
	if budget == "" {
		budget = strconv.Itoa(112 << 20) // the default (docs/contract.md §16)
	}
	return []string{"LEASESVC_MAX_SESSIONS=" + limit, "LEASESVC_MAX_SESSIONS_PER_CALLER=" + limit,
		"LEASESVC_MAX_CONNECTIONS=" + conns, "LEASESVC_MAX_CONNECTIONS_PER_ADDRESS=" + conns,
		"LEASESVC_MEMORY_PER_CALLER=" + budget}
}

func scaleRun(ctx context.Context, b *bench, n int, window time.Duration) ([]row, error) {
	settings := scaleSettings(n, os.Getenv)
	in, err := startInstance(ctx, b, fmt.Sprintf("scale-%d", n), settings...)
	if err != nil {
		return nil, err
	}
	defer in.stop(syscall.SIGTERM)
	time.Sleep(time.Second) // settle before the baseline
	rss0, err := svcproc.RSS(in.pid())
	if err != nil {
		return nil, err
	}
	var lost, resumes atomic.Int64
	agents := make([]*rawsession.Agent, n)
	names := make([]string, n)
	var opened atomic.Int64
	err = parallel(ctx, n, b.cfg.concurrency, func(i int) error {
		a := &rawsession.Agent{URLs: []string{in.url}, Window: window,
			OnPush: func(m rawsession.Message) {
				if m.Type == "lost" || m.Type == "revoked" {
					lost.Add(1)
				}
			},
			OnResume: func(string, rawsession.Message) { resumes.Add(1) }}
		if _, err := a.Open(ctx); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		agents[i] = a
		names[i] = fmt.Sprintf("%s.scale%d.%d", b.cfg.prefix, n, i)
		if _, err := a.Acquire(ctx, names[i], "agent-"+strconv.Itoa(i), 0); err != nil {
			return fmt.Errorf("session %d: acquire: %w", i, err)
		}
		b.progress(false, "sessionscale %d: %d opened", n, opened.Add(1))
		return nil
	})
	defer closeAgents(ctx, agents, b.cfg.concurrency)
	if err != nil {
		return nil, fmt.Errorf("open the sessions: %w", err)
	}
	time.Sleep(window) // every agent has had acks
	// Count lapses from here: an agent whose deadline passes would stop leading.
	stopWatch := watchLapses(ctx, agents, window/4)
	defer stopWatch()
	rss1, err := svcproc.RSS(in.pid())
	if err != nil {
		return nil, err
	}
	cpu0, err := svcproc.CPUTime(in.pid())
	if err != nil {
		return nil, err
	}
	beats0 := heartbeats(agents)
	start := time.Now()
	b.progress(true, "sessionscale %d: all open; heartbeating for %v", n, b.cfg.scaleDuration)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(b.cfg.scaleDuration):
	}
	cpu1, err := svcproc.CPUTime(in.pid())
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	beats := heartbeats(agents) - beats0
	nLapsed, ended := stopWatch(), 0
	for _, a := range agents {
		if a.Ended() {
			ended++
		}
	}
	// Is every lease still held by its agent?
	var notHeld atomic.Int64
	if err := parallel(ctx, n, b.cfg.concurrency, func(i int) error {
		a, err := b.svc.get(ctx, in.url, names[i])
		if err != nil {
			return err
		}
		if !a.ok() || a.lease.Holder != "agent-"+strconv.Itoa(i) || !a.lease.ServerTime.Before(a.lease.ExpireTime) {
			notHeld.Add(1)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the leases: %w", err)
	}
	sc := fmt.Sprintf("sessionscale %d sessions at %v", n, window)
	note := fmt.Sprintf("window %v, one lease each, for %v; load generator on the same machine; raised for one client address: %s",
		window, elapsed.Round(time.Second), strings.Join(settings, " "))
	cpu := cpu1 - cpu0
	return []row{
		{Scenario: sc, Metric: "heartbeats", Unit: "/s", Service: float64(beats) / elapsed.Seconds(), N: int(beats), Note: note},
		{Scenario: sc, Metric: "sessions expired or lapsed (lease lost, deadline passed, or not held at the end)", Unit: "count",
			Service: float64(max(int64(ended), lost.Load(), int64(nLapsed), notHeld.Load())), N: n,
			Note: fmt.Sprintf("sessions ended by the service %d, lost pushes %d, agents whose deadline passed %d, leases not held at the end %d, resumes %d",
				ended, lost.Load(), nLapsed, notHeld.Load(), resumes.Load())},
		{Scenario: sc, Metric: "instance CPU per 1,000 heartbeats", Unit: "ms", Service: float64(cpu.Milliseconds()) / (float64(beats) / 1000), N: int(beats),
			Note: fmt.Sprintf("%v CPU in %v (%.0f%% of a core), /proc/%d/stat", cpu, elapsed.Round(time.Second), 100*cpu.Seconds()/elapsed.Seconds(), in.pid())},
		{Scenario: sc, Metric: "instance memory per session", Unit: "KiB", Service: float64(rss1-rss0) / 1024 / float64(n), N: n,
			Note: fmt.Sprintf("VmRSS %d MiB with the sessions, %d MiB before", rss1>>20, rss0>>20)},
	}, nil
}

// heartbeats sums the heartbeats the agents sent.
func heartbeats(agents []*rawsession.Agent) int64 {
	var n int64
	for _, a := range agents {
		n += a.Heartbeats()
	}
	return n
}
