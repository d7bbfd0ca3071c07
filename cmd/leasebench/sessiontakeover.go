package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// takeoverArm is one way of holding in the sessiontakeover scenario.
type takeoverArm struct {
	label   string
	window  time.Duration // > 0: through a session with this window
	ttl     time.Duration // else: plain renewals of this TTL
	samples int
}

// sessionTakeover measures a crash takeover, side by side: an agent
// process holds a lease on the first URL, through a session (each window
// of -session-windows) or with plain renewals (each TTL of
// -session-compare-ttls); a candidate waits (waitMs) on the second URL;
// the agent is SIGKILLed; the figure is the time from the kill until the
// candidate's answer arrives, by leasebench's clock. The arms take turns,
// sample by sample, so that noise hits them alike; a TTL of 10 s or more
// gets -slow-samples samples, the others -samples.
func sessionTakeover(ctx context.Context, b *bench) ([]row, error) {
	first, second := b.cfg.urls[0], b.second()
	var arms []takeoverArm
	for _, w := range b.cfg.sessionWindows {
		arms = append(arms, takeoverArm{label: "session window " + w.String(), window: w, samples: b.cfg.samples})
	}
	for _, ttl := range b.cfg.compareTTLs {
		n := b.cfg.samples
		if ttl >= 10*time.Second {
			n = b.cfg.slowSamples
		}
		arms = append(arms, takeoverArm{label: "plain renewals ttl " + ttl.String(), ttl: ttl, samples: n})
	}
	got := make([]series, len(arms))
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	most := 0
	for _, a := range arms {
		most = max(most, a.samples)
	}
	for i := range most {
		for k, arm := range arms {
			if i >= arm.samples {
				continue
			}
			d, err := takeoverSample(ctx, b, rng, first, second, fmt.Sprintf("%s.sessiontakeover.%d.%d", b.cfg.prefix, k, i), arm)
			if err != nil {
				return takeoverRows(arms, got), fmt.Errorf("%s: %w", arm.label, err)
			}
			got[k] = append(got[k], d)
			b.progress(false, "sessiontakeover: %s %d/%d: %v", arm.label, i+1, arm.samples, d.Round(time.Millisecond))
		}
	}
	return takeoverRows(arms, got), nil
}

func takeoverRows(arms []takeoverArm, got []series) []row {
	var rows []row
	for k, arm := range arms {
		if len(got[k]) == 0 {
			continue
		}
		note := "SIGKILL of the holding agent → the waiting candidate on the second URL holds, client clock"
		if arm.window > 0 {
			note += fmt.Sprintf("; target p99 ≤ window + 100 ms = %v", arm.window+100*time.Millisecond)
		}
		for _, q := range []struct {
			name string
			p    float64
		}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
			rows = append(rows, row{Scenario: "sessiontakeover", Metric: "crash takeover, " + arm.label + " " + q.name, Unit: "ms",
				Service: got[k].q(q.p), N: len(got[k]), Note: note})
			note = ""
		}
	}
	return rows
}

// takeoverSample runs one takeover and returns kill → the candidate holds.
func takeoverSample(ctx context.Context, b *bench, rng *rand.Rand, first, second, name string, arm takeoverArm) (time.Duration, error) {
	spec := agentSpec{URL: first, Name: name, Holder: "crashing-agent", WindowMs: arm.window.Milliseconds(), TTLMs: arm.ttl.Milliseconds()}
	p, err := startAgent(ctx, spec)
	if err != nil {
		return 0, err
	}
	defer p.kill()
	bound, beat := arm.window, arm.window/4
	if arm.window == 0 {
		bound, beat = arm.ttl, arm.ttl/3
	}
	type result struct {
		a   answer
		at  time.Time
		err error
	}
	res := make(chan result, 1)
	go func() {
		a, err := b.svc.acquire(ctx, second, name, "candidate", time.Minute, bound+handoffWait)
		res <- result{a, time.Now(), err}
	}()
	// The candidate is waiting; the kill falls anywhere between two
	// heartbeats (renewals).
	time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(beat))))
	killed := time.Now()
	p.kill()
	r := <-res
	if _, err := must(r.a, r.err); err != nil {
		return 0, fmt.Errorf("candidate: %w", err)
	}
	if r.a.lease.FencingToken != p.token+1 {
		return 0, fmt.Errorf("candidate got token %d, want %d", r.a.lease.FencingToken, p.token+1)
	}
	if _, err := must(b.svc.release(ctx, second, name, "candidate", r.a.lease.FencingToken)); err != nil {
		return 0, err
	}
	return r.at.Sub(killed), nil
}
