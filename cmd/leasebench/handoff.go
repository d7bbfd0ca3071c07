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
// sending the release until the waiter's answer (it holds) arrives. A watch
// stream on the second URL, opened before the release, shows when the
// release's event reached the waiter's instance, which splits the handoff
// into its steps (see handoffSteps).
func handoff(ctx context.Context, b *bench) ([]row, error) {
	first, second := b.cfg.urls[0], b.second()
	var lat series
	var steps handoffSteps
	// PostgreSQL without Pub/Sub wakes the waiter through LISTEN/NOTIFY:
	// the release's event never reaches the second instance's streams, so
	// there are no steps to split, only the handoff.
	events := b.cfg.backend != "postgres" || b.cfg.topic != ""
	for i := range b.cfg.samples {
		name := fmt.Sprintf("%s.handoff.%d", b.cfg.prefix, i)
		a, err := must(b.svc.acquire(ctx, first, name, "a", time.Minute, 0))
		if err != nil {
			return nil, err
		}
		wctx, stopWatch := context.WithCancel(ctx)
		var stream <-chan sse
		if events {
			if stream, err = b.svc.watch(wctx, second, name); err != nil {
				stopWatch()
				return nil, err
			}
		}
		type result struct {
			a   answer
			at  time.Time
			err error
		}
		got := make(chan result, 1)
		go func() {
			w, err := b.svc.acquire(ctx, second, name, "b", time.Minute, handoffWait)
			got <- result{w, time.Now(), err}
		}()
		time.Sleep(200 * time.Millisecond) // b is waiting
		sent := time.Now()
		rel, err := must(b.svc.release(ctx, first, name, "a", a.lease.FencingToken))
		answered := time.Now()
		if err != nil {
			stopWatch()
			return nil, err
		}
		r := <-got
		if _, err := must(r.a, r.err); err != nil {
			stopWatch()
			return nil, fmt.Errorf("waiter: %w", err)
		}
		lat = append(lat, r.at.Sub(sent))
		if r.a.lease.FencingToken != a.lease.FencingToken+1 {
			stopWatch()
			return nil, fmt.Errorf("waiter got token %d, want %d", r.a.lease.FencingToken, a.lease.FencingToken+1)
		}
		evAt := answered // without events: the release's answer stands for its event
		if events {
			if evAt, err = eventAt(stream, fmt.Sprintf("%s/%d/released", name, a.lease.FencingToken)); err != nil {
				stopWatch()
				return nil, fmt.Errorf("watch on %s: %w", second, err)
			}
		}
		stopWatch()
		steps.add(sent, answered, evAt, r.at, rel.lease.ExpireTime, r.a.lease.AcquireTime)
		if _, err := must(b.svc.release(ctx, second, name, "b", r.a.lease.FencingToken)); err != nil {
			return nil, err
		}
		b.progress(false, "handoff: %d/%d", i+1, b.cfg.samples)
	}
	note := "release on the first URL → the waiter on the second holds"
	return append([]row{
		{Scenario: "handoff", Metric: "graceful handoff p50", Unit: "ms", Service: lat.q(0.5), N: len(lat), Note: note},
		{Scenario: "handoff", Metric: "graceful handoff p99", Unit: "ms", Service: lat.q(0.99), N: len(lat), Note: note},
	}, steps.rows(events)...), nil
}

// handoffSteps splits handoffs into consecutive steps, by the client's
// clock: the release answered; its event on the waiter's instance (read
// from a watch stream there, so it includes the stream's own delivery, well
// under a millisecond); the waiter's answer. Beside them, in server time,
// from the release's decision to the new holding's.
type handoffSteps struct {
	release, event, acquire, server series
}

func (h *handoffSteps) add(sent, answered, event, held, releasedAt, acquiredAt time.Time) {
	h.release = append(h.release, answered.Sub(sent))
	h.event = append(h.event, event.Sub(answered))
	h.acquire = append(h.acquire, held.Sub(event))
	h.server = append(h.server, acquiredAt.Sub(releasedAt))
}

func (h *handoffSteps) rows(events bool) []row {
	var rows []row
	steps := []struct {
		metric string
		s      series
	}{
		{"release sent → answered", h.release},
		{"release answered → released event on the second URL", h.event},
		{"released event on the second URL → the waiter holds", h.acquire},
		{"server time: release → new holding's acquireTime", h.server},
	}
	if !events { // no event on the second URL: from the release's answer
		steps[2].metric = "release answered → the waiter holds"
		steps = append(steps[:1], steps[2:]...)
	}
	for _, s := range steps {
		rows = append(rows,
			row{Scenario: "handoff", Metric: "step: " + s.metric + " p50", Unit: "ms", Service: s.s.q(0.5), N: len(s.s)},
			row{Scenario: "handoff", Metric: "step: " + s.metric + " p99", Unit: "ms", Service: s.s.q(0.99), N: len(s.s)})
	}
	return rows
}

// eventAt returns when the event with SSE id came on stream, waiting at
// most eventWait for it.
func eventAt(stream <-chan sse, id string) (time.Time, error) {
	timeout := time.NewTimer(eventWait)
	defer timeout.Stop()
	for {
		select {
		case ev, ok := <-stream:
			if !ok {
				return time.Time{}, fmt.Errorf("stream ended before event %s", id)
			}
			if ev.id == id {
				return ev.at, nil
			}
		case <-timeout.C:
			return time.Time{}, fmt.Errorf("no event %s within %v", id, eventWait)
		}
	}
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
