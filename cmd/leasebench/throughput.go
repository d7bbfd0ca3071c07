package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// throughput runs, for every agent count, that many agents each holding a
// lease of its own and renewing it every ttl/3 (with ±10% jitter) for the
// configured duration. An agent whose renew is answered lease_lost counts
// a lost holding and acquires again. When one agent count fails, the rows
// of those before it come back with the error.
func throughput(ctx context.Context, b *bench) ([]row, error) {
	var rows []row
	for _, n := range b.cfg.agents {
		r, err := throughputRun(ctx, b, n)
		if err != nil {
			return rows, fmt.Errorf("%d agents: %w", n, err) // the runs before it still count
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// agentState is one agent's holding.
type agentState struct {
	name, holder, url string
	token             int64
}

func throughputRun(ctx context.Context, b *bench, n int) ([]row, error) {
	ttl := b.cfg.ttl
	urls := b.cfg.urls
	if b.cfg.agentURLs > 0 {
		urls = urls[:b.cfg.agentURLs]
	}
	agents := make([]*agentState, n)
	for i := range agents {
		agents[i] = &agentState{
			name:   fmt.Sprintf("%s.agents%d.%d", b.cfg.prefix, n, i),
			holder: fmt.Sprintf("agent-%d", i),
			url:    urls[i%len(urls)],
		}
	}
	var (
		mu                       sync.Mutex
		lat, lag                 series
		renewals, lost, failures atomic.Int64
		firstErr                 atomic.Pointer[error]
		period                   = ttl / 3
		runCtx, stop             = context.WithCancel(ctx)
		wg                       sync.WaitGroup
		measuring                atomic.Bool // set-up is over: renewals count
		measureStart             time.Time
	)
	defer stop()
	fail := func(err error) {
		failures.Add(1)
		firstErr.CompareAndSwap(nil, &err)
	}
	// renewLoop renews agent i's lease every ttl/3 (±10%) from its
	// acquire at acquired, from the moment its lease is set up, so that a
	// set-up longer than the TTL does not let the first holdings expire;
	// only renewals sent after the set-up count towards the rate and the
	// latencies, while lost holdings and failures count throughout.
	renewLoop := func(i int, a *agentState, acquired time.Time) {
		rng := rand.New(rand.NewPCG(uint64(i), uint64(n)))
		next := acquired.Add(time.Duration(rng.Int64N(int64(period))))
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			counted := measuring.Load()
			ans, err := b.svc.renew(ctx, a.url, a.name, a.holder, a.token)
			took := time.Since(sent)
			switch {
			case err != nil:
				fail(err)
			case ans.status == http.StatusConflict && ans.code == "lease_lost":
				lost.Add(1)
				if re, err := must(b.svc.acquire(ctx, a.url, a.name, a.holder, ttl, 0)); err == nil {
					a.token = re.lease.FencingToken
				}
			case !ans.ok():
				fail(fmt.Errorf("renew %s: %d %s", a.name, ans.status, ans.code))
			case counted:
				renewals.Add(1)
				mu.Lock()
				lat = append(lat, took)
				lag = append(lag, sent.Sub(next))
				mu.Unlock()
			}
			jitter := time.Duration(rng.Int64N(int64(period/5))) - period/10
			next = next.Add(period + jitter)
			if now := time.Now(); next.Before(now) {
				next = now // behind schedule: do not burst to catch up
			}
			t.Reset(time.Until(next))
		}
	}

	var acquired atomic.Int64
	start := time.Now()
	err := parallel(ctx, n, b.cfg.concurrency, func(i int) error {
		a := agents[i]
		sent := time.Now()
		ans, err := must(b.svc.acquire(ctx, a.url, a.name, a.holder, ttl, 0))
		if err != nil {
			return err
		}
		a.token = ans.lease.FencingToken
		wg.Go(func() { renewLoop(i, a, sent) })
		b.progress(false, "throughput %d agents: %d acquired", n, acquired.Add(1))
		return nil
	})
	if err != nil {
		stop()
		wg.Wait()
		return nil, fmt.Errorf("acquire the agents' leases: %w", err)
	}
	acquireRate := float64(n) / time.Since(start).Seconds()
	if l := lost.Load(); l > 0 {
		b.progress(true, "throughput %d agents: %d holdings lost during set-up", n, l)
	}
	measureStart = time.Now()
	measuring.Store(true)
	time.AfterFunc(b.cfg.duration, stop)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				b.progress(true, "throughput %d agents: %d renewals, %d lost, %d failed in %v", n, renewals.Load(), lost.Load(), failures.Load(), time.Since(measureStart).Round(time.Second))
			}
		}
	}()
	wg.Wait()
	close(done)
	elapsed := time.Since(measureStart)

	var released atomic.Int64
	if err := parallel(ctx, n, b.cfg.concurrency, func(i int) error {
		a := agents[i]
		_, err := b.svc.release(ctx, a.url, a.name, a.holder, a.token)
		b.progress(false, "throughput %d agents: %d released", n, released.Add(1))
		return err
	}); err != nil {
		return nil, fmt.Errorf("release the agents' leases: %w", err)
	}
	if failures.Load() > 0 {
		b.progress(true, "throughput %d agents: %d renewals failed; first: %v", n, failures.Load(), *firstErr.Load())
	}
	sc := fmt.Sprintf("throughput %d agents", n)
	note := fmt.Sprintf("ttl %v, renew every %v, for %v", ttl, period.Round(time.Millisecond), elapsed.Round(time.Second))
	return []row{
		{Scenario: sc, Metric: "offered renewals", Unit: "/s", Service: float64(n) / period.Seconds(), N: n, Note: note},
		{Scenario: sc, Metric: "achieved renewals", Unit: "/s", Service: float64(renewals.Load()) / elapsed.Seconds(), N: int(renewals.Load())},
		{Scenario: sc, Metric: "renew p50", Unit: "ms", Service: lat.q(0.5), N: len(lat)},
		{Scenario: sc, Metric: "renew p99", Unit: "ms", Service: lat.q(0.99), N: len(lat)},
		{Scenario: sc, Metric: "renew p99.9", Unit: "ms", Service: lat.q(0.999), N: len(lat)},
		{Scenario: sc, Metric: "holdings lost (renew answered lease_lost)", Unit: "count", Service: float64(lost.Load()), N: int(renewals.Load() + lost.Load())},
		{Scenario: sc, Metric: "renewals failed (error, 5xx)", Unit: "count", Service: float64(failures.Load()), N: int(renewals.Load() + failures.Load())},
		{Scenario: sc, Metric: "client lag behind schedule p99", Unit: "ms", Service: lag.q(0.99), N: len(lag), Note: "large: the load generator itself fell behind"},
		{Scenario: sc, Metric: "set-up acquires", Unit: "/s", Service: acquireRate, N: n, Note: fmt.Sprintf("%d in flight", b.cfg.concurrency)},
	}, nil
}

// parallel calls f(0) … f(n-1) with at most width calls at a time and
// returns the first error (the remaining calls are skipped once one fails).
func parallel(ctx context.Context, n, width int, f func(i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		failed   atomic.Bool
	)
	for range min(width, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() {
					return
				}
				if err := ctx.Err(); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
