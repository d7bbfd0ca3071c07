package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Priorities of the succession scenario's holder and candidate.
const (
	successionLow  = 1
	successionHigh = 10
)

// stepDown is what the succession scenario's holder did when asked to
// yield.
type stepDown struct {
	yieldAt    time.Time // the renewal answer that asked it to yield arrived
	sent       time.Time // its release with a checkpoint was sent
	answered   time.Time // and answered
	checkpoint string    // the checkpoint that release wrote
	release    answer
	err        error
}

// succession measures a preemption (docs/contract.md §8): a holder of
// priority 1 on the first URL renews every -succession-renew with a
// checkpoint; a candidate of priority 10 joins on the second URL with a
// waiting acquire asking to preempt; the holder sees yieldRequested on its
// next renewal and releases with a checkpoint, and the lease, reserved for
// the candidate, goes to it with that checkpoint. The figures: from the
// candidate's join until its acquire answers (it leads), and its steps.
func succession(ctx context.Context, b *bench) ([]row, error) {
	first, second := b.cfg.urls[0], b.second()
	ttl, every := b.cfg.successionTTL, b.cfg.successionRenew
	var join, yield, release, server series
	for i := range b.cfg.samples {
		name := fmt.Sprintf("%s.succession.%d", b.cfg.prefix, i)
		h, err := must(b.svc.candidate(ctx, first, name, "low", ttl, 0, successionLow, false))
		if err != nil {
			return nil, fmt.Errorf("holder: %w", err)
		}
		hctx, stopHolder := context.WithCancel(ctx)
		done := make(chan stepDown, 1)
		go func() { done <- b.lead(hctx, ctx, first, name, h.lease.FencingToken, every) }()
		// The holder renews a few times first; the join falls anywhere
		// between two of its renewals.
		time.Sleep(2*every + rand.N(every))
		joined := time.Now()
		c, err := must(b.svc.candidate(ctx, second, name, "high", time.Minute, ttl+handoffWait, successionHigh, true))
		led := time.Now()
		stopHolder()
		d := <-done
		if err != nil {
			return nil, fmt.Errorf("candidate: %w", err)
		}
		if d.err != nil {
			return nil, d.err
		}
		if c.lease.FencingToken != h.lease.FencingToken+1 {
			return nil, fmt.Errorf("candidate got token %d, want %d", c.lease.FencingToken, h.lease.FencingToken+1)
		}
		if !sameCheckpoint(c.lease.Checkpoint, d.checkpoint) || c.lease.CheckpointToken != h.lease.FencingToken {
			return nil, fmt.Errorf("candidate inherited checkpoint %s of token %d, want %s of token %d",
				c.lease.Checkpoint, c.lease.CheckpointToken, d.checkpoint, h.lease.FencingToken)
		}
		join = append(join, led.Sub(joined))
		yield = append(yield, d.yieldAt.Sub(joined))
		release = append(release, led.Sub(d.sent))
		server = append(server, c.lease.AcquireTime.Sub(d.release.lease.ExpireTime))
		if _, err := must(b.svc.release(ctx, second, name, "high", c.lease.FencingToken)); err != nil {
			return nil, err
		}
		b.progress(false, "succession: %d/%d", i+1, b.cfg.samples)
	}
	note := fmt.Sprintf("holder priority %d renews every %v (ttl %v); candidate priority %d with preempt", successionLow, every, ttl, successionHigh)
	rows := []row{
		{Scenario: "succession", Metric: "join → the candidate leads p50", Unit: "ms", Service: join.q(0.5), N: len(join), Note: note},
		{Scenario: "succession", Metric: "join → the candidate leads p99", Unit: "ms", Service: join.q(0.99), N: len(join), Note: note},
	}
	for _, s := range []struct {
		metric string
		s      series
	}{
		{"join → the holder sees yieldRequested", yield},
		{"release sent → the reserved candidate leads", release},
		{"server time: release → the candidate's acquireTime", server},
	} {
		rows = append(rows,
			row{Scenario: "succession", Metric: "step: " + s.metric + " p50", Unit: "ms", Service: s.s.q(0.5), N: len(s.s)},
			row{Scenario: "succession", Metric: "step: " + s.metric + " p99", Unit: "ms", Service: s.s.q(0.99), N: len(s.s)})
	}
	return rows, nil
}

// lead is the succession scenario's holder: it renews token every interval
// with a checkpoint {"token":T,"n":k} until a renewal answers
// yieldRequested, then releases with the next checkpoint. hctx ends its
// renewals; the release itself runs under ctx.
func (b *bench) lead(hctx, ctx context.Context, base, name string, token int64, every time.Duration) stepDown {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-hctx.Done():
			return stepDown{err: errors.New("holder: never asked to yield before the candidate led")}
		case <-t.C:
		}
		a, err := must(b.svc.renewCheckpoint(hctx, base, name, "low", token, fmt.Sprintf(`{"token":%d,"n":%d}`, token, n)))
		if err != nil {
			if hctx.Err() != nil {
				return stepDown{err: errors.New("holder: never asked to yield before the candidate led")}
			}
			return stepDown{err: fmt.Errorf("holder's renewal: %w", err)}
		}
		if a.yieldTo == "" {
			continue
		}
		d := stepDown{yieldAt: time.Now()}
		if a.yieldTo != "high" {
			d.err = fmt.Errorf("holder asked to yield to %q, want high", a.yieldTo)
			return d
		}
		d.checkpoint = fmt.Sprintf(`{"token":%d,"n":%d}`, token, n+1)
		d.sent = time.Now()
		d.release, d.err = must(b.svc.releaseCheckpoint(ctx, base, name, "low", token, d.checkpoint))
		d.answered = time.Now()
		if d.err != nil {
			d.err = fmt.Errorf("holder's release: %w", d.err)
		}
		return d
	}
}

// sameCheckpoint reports whether the checkpoint a lease carries is want,
// whatever its spacing.
func sameCheckpoint(got json.RawMessage, want string) bool {
	var g, w bytes.Buffer
	return json.Compact(&g, got) == nil && json.Compact(&w, []byte(want)) == nil && bytes.Equal(g.Bytes(), w.Bytes())
}
