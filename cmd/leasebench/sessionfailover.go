package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// sessionFailover runs -failover-runs times: two instances started from
// -leasesvc (A and B, on leasebench's backend); -failover-sessions agents
// open their sessions on A and take -failover-leases leases each; A is
// SIGKILLed (even runs) or SIGTERMed (odd runs); the agents resume on B.
// Then every lease is read on B: does it keep its holder and token? Also:
// kill → each agent's resume answered, and the agents whose own deadline
// passed meanwhile (they stopped leading for a moment, as they must when
// the instance is gone longer than their window).
func sessionFailover(ctx context.Context, b *bench) ([]row, error) {
	if b.cfg.backend == "memory" {
		return nil, errors.New("needs a backend the instances share (postgres, firestore, spanner); memory-backend instances share nothing")
	}
	type tally struct {
		runs, leases, kept, lost, lapsed int
		resume                           series
	}
	by := map[string]*tally{"SIGKILL": {}, "SIGTERM": {}}
	var rows []row
	report := func() []row {
		rows = rows[:0]
		for _, sig := range []string{"SIGKILL", "SIGTERM"} {
			t := by[sig]
			if t.runs == 0 {
				continue
			}
			sc := "sessionfailover " + sig
			note := fmt.Sprintf("%d runs of %d sessions × %d leases on the instance that goes", t.runs, b.cfg.failoverSessions, b.cfg.failoverLeases)
			rows = append(rows,
				row{Scenario: sc, Metric: "leases that kept holder and token", Unit: "count", Service: float64(t.kept), N: t.leases, Note: note},
				row{Scenario: sc, Metric: "leases lost or changed", Unit: "count", Service: float64(t.lost), N: t.leases},
				row{Scenario: sc, Metric: "signal → resume answered on the other instance p50", Unit: "ms", Service: t.resume.q(0.5), N: len(t.resume)},
				row{Scenario: sc, Metric: "signal → resume answered on the other instance p99", Unit: "ms", Service: t.resume.q(0.99), N: len(t.resume)},
				row{Scenario: sc, Metric: "agents whose deadline passed during the failover", Unit: "count", Service: float64(t.lapsed), N: t.runs * b.cfg.failoverSessions,
					Note: "they stop leading until the resume; their leases keep holder and token"})
		}
		return rows
	}
	for r := range b.cfg.failoverRuns {
		sig, name := syscall.SIGKILL, "SIGKILL"
		if r%2 == 1 {
			sig, name = syscall.SIGTERM, "SIGTERM"
		}
		t := by[name]
		res, err := failoverRun(ctx, b, r, sig)
		if err != nil {
			return report(), fmt.Errorf("run %d (%s): %w", r+1, name, err)
		}
		t.runs++
		t.leases += res.leases
		t.kept += res.kept
		t.lost += res.leases - res.kept
		t.lapsed += res.lapsed
		t.resume = append(t.resume, res.resume...)
		b.progress(true, "sessionfailover: run %d/%d (%s): %d of %d leases kept holder and token; resumes p99 %.0f ms; %d agents lapsed",
			r+1, b.cfg.failoverRuns, name, res.kept, res.leases, res.resume.q(0.99), res.lapsed)
	}
	return report(), nil
}

// failoverResult is one run's outcome.
type failoverResult struct {
	leases, kept, lapsed int
	resume               series
}

func failoverRun(ctx context.Context, b *bench, run int, sig syscall.Signal) (failoverResult, error) {
	var out failoverResult
	limit := strconv.Itoa(b.cfg.failoverSessions + 10)
	env := []string{"LEASESVC_MAX_SESSIONS=" + limit, "LEASESVC_MAX_SESSIONS_PER_CALLER=" + limit}
	a, err := startInstance(ctx, b, fmt.Sprintf("failover-a-%d", run), env...)
	if err != nil {
		return out, err
	}
	defer a.stop(syscall.SIGKILL)
	bi, err := startInstance(ctx, b, fmt.Sprintf("failover-b-%d", run), env...)
	if err != nil {
		return out, err
	}
	defer bi.stop(syscall.SIGTERM)

	n, per := b.cfg.failoverSessions, b.cfg.failoverLeases
	agents := make([]*rawsession.Agent, n)
	var (
		mu       sync.Mutex
		killedAt time.Time
		resumed  = map[int]time.Time{}
		allIn    = make(chan struct{})
	)
	err = parallel(ctx, n, b.cfg.concurrency, func(i int) error {
		ag := &rawsession.Agent{URLs: []string{a.url, bi.url}, Window: time.Second,
			OnResume: func(url string, _ rawsession.Message) {
				mu.Lock()
				defer mu.Unlock()
				if url == bi.url && !killedAt.IsZero() {
					if _, ok := resumed[i]; !ok {
						resumed[i] = time.Now()
						if len(resumed) == n {
							close(allIn)
						}
					}
				}
			}}
		if _, err := ag.Open(ctx); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		agents[i] = ag
		for k := range per {
			if _, err := ag.Acquire(ctx, fmt.Sprintf("%s.failover%d.%d.%d", b.cfg.prefix, run, i, k), "agent-"+strconv.Itoa(i), 0); err != nil {
				return fmt.Errorf("session %d: acquire: %w", i, err)
			}
		}
		return nil
	})
	defer closeAgents(ctx, agents, b.cfg.concurrency)
	if err != nil {
		return out, fmt.Errorf("open the sessions: %w", err)
	}
	// What every agent holds before the failover.
	want := map[string]rawsession.Held{}
	for _, ag := range agents {
		for _, h := range ag.Held() {
			want[h.Name] = h
		}
	}
	time.Sleep(500 * time.Millisecond) // every agent has had acks
	// Which agents' deadlines pass during the failover.
	stopWatch := watchLapses(ctx, agents, 50*time.Millisecond)
	defer stopWatch()
	mu.Lock()
	killedAt = time.Now()
	mu.Unlock()
	go a.stop(sig)
	select {
	case <-allIn:
	case <-time.After(60 * time.Second):
		mu.Lock()
		got := len(resumed)
		mu.Unlock()
		return out, fmt.Errorf("only %d of %d agents resumed on the other instance within 60s", got, n)
	case <-ctx.Done():
		return out, ctx.Err()
	}
	time.Sleep(time.Second) // every agent leads again
	out.lapsed = stopWatch()
	mu.Lock()
	for _, at := range resumed {
		out.resume = append(out.resume, at.Sub(killedAt))
	}
	mu.Unlock()
	// Does every lease keep its holder and token, read on B?
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	var kept atomic.Int64
	if err := parallel(ctx, len(names), b.cfg.concurrency, func(i int) error {
		h := want[names[i]]
		ans, err := b.svc.get(ctx, bi.url, h.Name)
		if err != nil {
			return err
		}
		if ans.ok() && ans.lease.Holder == h.Holder && ans.lease.FencingToken == h.FencingToken && ans.lease.ServerTime.Before(ans.lease.ExpireTime) {
			kept.Add(1)
		}
		return nil
	}); err != nil {
		return out, fmt.Errorf("read the leases: %w", err)
	}
	out.leases, out.kept = len(want), int(kept.Load())
	return out, nil
}
