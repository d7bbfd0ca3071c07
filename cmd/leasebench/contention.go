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

// contention measures the holder's renew latency on one lease (a renew
// every -renew-every), first alone and then while the configured number of
// contenders hammer acquire on it (each refused with lease_held), once per
// contender pause (drawn uniformly from half to one and a half times it).
func contention(ctx context.Context, b *bench) ([]row, error) {
	var rows []row
	for i, pause := range b.cfg.pauses {
		r, err := contentionRun(ctx, b, i, pause)
		if err != nil {
			return rows, fmt.Errorf("pause %v: %w", pause, err) // the runs before it still count
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func contentionRun(ctx context.Context, b *bench, run int, pause time.Duration) ([]row, error) {
	base := b.cfg.urls[0]
	name := fmt.Sprintf("%s.contended.%d", b.cfg.prefix, run)
	const holder = "holder"
	a, err := must(b.svc.acquire(ctx, base, name, holder, time.Minute, 0))
	if err != nil {
		return nil, err
	}
	token := a.lease.FencingToken
	// With a direct path, a holder of a lease of its own renews it directly
	// beside the service's holder: the same backend load without the
	// service, and without contenders on its lease.
	dname := fmt.Sprintf("%s.contended-direct.%d", b.cfg.prefix, run)
	if b.direct != nil {
		if _, err := b.direct.acquire(ctx, dname, holder, time.Minute); err != nil {
			return nil, err
		}
	}
	renews := func(what string) (series, series, error) {
		var s, d series
		for i := range b.cfg.n {
			if i > 0 {
				time.Sleep(b.cfg.renewEvery)
			}
			start := time.Now()
			if _, err := must(b.svc.renew(ctx, base, name, holder, token)); err != nil {
				return nil, nil, fmt.Errorf("%s renew: %w", what, err)
			}
			s = append(s, time.Since(start))
			if b.direct != nil {
				start = time.Now()
				if err := b.direct.renew(ctx, dname, holder, 1); err != nil {
					return nil, nil, fmt.Errorf("%s direct renew: %w", what, err)
				}
				d = append(d, time.Since(start))
			}
			b.progress(false, "contention: %s renew %d/%d", what, i+1, b.cfg.n)
		}
		return s, d, nil
	}
	if _, _, err := renews("warm-up"); err != nil {
		return nil, err
	}
	alone, dalone, err := renews("uncontended")
	if err != nil {
		return nil, err
	}

	hammer, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg             sync.WaitGroup
		refused, other atomic.Int64
		firstOther     atomic.Value
	)
	for c := range b.cfg.contenders {
		wg.Go(func() {
			url := b.cfg.urls[c%len(b.cfg.urls)]
			who := fmt.Sprintf("contender-%d", c)
			for hammer.Err() == nil {
				ans, err := b.svc.acquire(hammer, url, name, who, time.Minute, 0)
				switch {
				case hammer.Err() != nil:
				case err == nil && ans.status == http.StatusConflict && ans.code == "lease_held":
					refused.Add(1)
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprintf("%d %s %v", ans.status, ans.code, err))
				}
				if pause > 0 { // jittered (±50%), so the contenders do not move in step
					t := time.NewTimer(pause/2 + rand.N(pause))
					select {
					case <-hammer.Done():
					case <-t.C:
					}
					t.Stop()
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // let the contenders reach full speed
	before, start := refused.Load(), time.Now()
	contended, dcontended, err := renews("contended")
	rate := float64(refused.Load()-before) / time.Since(start).Seconds()
	stop()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	if _, err := must(b.svc.release(ctx, base, name, holder, token)); err != nil {
		return nil, err
	}
	if b.direct != nil {
		if err := b.direct.release(ctx, dname, holder, 1); err != nil {
			return nil, err
		}
	}
	mode := "flat out"
	if pause > 0 {
		mode = "every ~" + pause.String()
	}
	sc := fmt.Sprintf("contention %d contenders %s", b.cfg.contenders, mode)
	note := ""
	if n := other.Load(); n > 0 {
		note = fmt.Sprintf("first: %v", firstOther.Load())
	}
	ratio := contended.q(0.99) / alone.q(0.99)
	renewRow := func(metric string, s, d series, q float64) row {
		if b.direct == nil {
			return row{Scenario: sc, Metric: metric, Unit: "ms", Service: s.q(q), N: len(s)}
		}
		r := pair(sc, metric, "ms", s.q(q), d.q(q), len(s))
		r.Note = "direct: a direct holder's renew of another lease at the same time"
		return r
	}
	return []row{
		renewRow("holder renew p50, uncontended", alone, dalone, 0.5),
		renewRow("holder renew p99, uncontended", alone, dalone, 0.99),
		renewRow("holder renew p50, contended", contended, dcontended, 0.5),
		renewRow("holder renew p99, contended", contended, dcontended, 0.99),
		{Scenario: sc, Metric: "contended ÷ uncontended renew p99", Unit: "×", Service: ratio, N: len(contended)},
		{Scenario: sc, Metric: "refusals (lease_held)", Unit: "/s", Service: rate, N: int(refused.Load())},
		{Scenario: sc, Metric: "contender answers other than lease_held", Unit: "count", Service: float64(other.Load()), N: int(refused.Load() + other.Load()), Note: note},
	}, nil
}
