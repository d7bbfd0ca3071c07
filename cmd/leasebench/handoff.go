package main

import (
	"context"
	"fmt"
	"time"
)

// handoffWait is how long a waiting acquire of the handoff and takeover
// scenarios may wait (waitMs) beyond the holding's own time.
const handoffWait = 10 * time.Second

// handoff measures a graceful handoff: a holder on the first URL releases
// while an acquire with waitMs waits on the second URL; the time from
// sending the release until the waiter's answer (it holds) arrives.
func handoff(ctx context.Context, b *bench) ([]row, error) {
	first, second := b.cfg.urls[0], b.second()
	var lat series
	for i := range b.cfg.samples {
		name := fmt.Sprintf("%s.handoff.%d", b.cfg.prefix, i)
		a, err := must(b.svc.acquire(ctx, first, name, "a", time.Minute, 0))
		if err != nil {
			return nil, err
		}
		type result struct {
			a   answer
			err error
		}
		got := make(chan result, 1)
		go func() {
			w, err := b.svc.acquire(ctx, second, name, "b", time.Minute, handoffWait)
			got <- result{w, err}
		}()
		time.Sleep(200 * time.Millisecond) // b is waiting
		sent := time.Now()
		if _, err := must(b.svc.release(ctx, first, name, "a", a.lease.FencingToken)); err != nil {
			return nil, err
		}
		r := <-got
		if _, err := must(r.a, r.err); err != nil {
			return nil, fmt.Errorf("waiter: %w", err)
		}
		lat = append(lat, time.Since(sent))
		if r.a.lease.FencingToken != a.lease.FencingToken+1 {
			return nil, fmt.Errorf("waiter got token %d, want %d", r.a.lease.FencingToken, a.lease.FencingToken+1)
		}
		if _, err := must(b.svc.release(ctx, second, name, "b", r.a.lease.FencingToken)); err != nil {
			return nil, err
		}
		b.progress(false, "handoff: %d/%d", i+1, b.cfg.samples)
	}
	note := "release on the first URL → the waiter on the second holds"
	return []row{
		{Scenario: "handoff", Metric: "graceful handoff p50", Unit: "ms", Service: lat.q(0.5), N: len(lat), Note: note},
		{Scenario: "handoff", Metric: "graceful handoff p99", Unit: "ms", Service: lat.q(0.99), N: len(lat), Note: note},
	}, nil
}

// takeover measures a crash takeover: a holder on the first URL acquires
// with the takeover TTL and never renews; an acquire waiting on the second
// URL takes over. The figure is server time: the new holding's acquireTime
// minus the crashed holding's expireTime.
func takeover(ctx context.Context, b *bench) ([]row, error) {
	first, second := b.cfg.urls[0], b.second()
	var gap series
	for i := range b.cfg.samples {
		name := fmt.Sprintf("%s.takeover.%d", b.cfg.prefix, i)
		c, err := must(b.svc.acquire(ctx, first, name, "crashed", b.cfg.takeoverTTL, 0))
		if err != nil {
			return nil, fmt.Errorf("acquire with ttl %v (is it below the service's minimum TTL?): %w", b.cfg.takeoverTTL, err)
		}
		d, err := must(b.svc.acquire(ctx, second, name, "successor", time.Minute, b.cfg.takeoverTTL+handoffWait))
		if err != nil {
			return nil, fmt.Errorf("waiter: %w", err)
		}
		gap = append(gap, d.lease.AcquireTime.Sub(c.lease.ExpireTime))
		if _, err := must(b.svc.release(ctx, second, name, "successor", d.lease.FencingToken)); err != nil {
			return nil, err
		}
		b.progress(false, "takeover: %d/%d", i+1, b.cfg.samples)
	}
	note := fmt.Sprintf("ttl %v; new acquireTime − crashed expireTime, server time", b.cfg.takeoverTTL)
	return []row{
		{Scenario: "takeover", Metric: "crash takeover p50", Unit: "ms", Service: gap.q(0.5), N: len(gap), Note: note},
		{Scenario: "takeover", Metric: "crash takeover p99", Unit: "ms", Service: gap.q(0.99), N: len(gap), Note: note},
	}, nil
}
