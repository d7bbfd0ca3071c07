package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// latencyWarmUp is how many rounds run before latency samples count:
// connections, the backend's caches and a JIT warm up.
const latencyWarmUp = 10

// latency times an uncontended acquire (of a new lease), renew and release
// through the service and directly, n rounds; in each round the order of
// service and direct is drawn at random for every operation, so both see
// the same load. It also times GET /healthz, the HTTP round trip alone,
// and, where the direct path has one (Spanner), the minimal transaction
// beside each renew, in the same random order: the floor that shows the
// store's own per-operation cost, which the direct path, running the
// store's read and mutation, shares with the service.
func latency(ctx context.Context, b *bench) ([]row, error) {
	base := b.cfg.urls[0]
	ops := []string{"acquire", "renew", "release"}
	svc, dir := map[string]*series{}, map[string]*series{}
	var hop, minimal series
	mini, _ := b.direct.(minimaler)
	const holder, ttl = "bench", 30 * time.Second
	for i := range latencyWarmUp + b.cfg.n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		keep := i >= latencyWarmUp
		name := fmt.Sprintf("%s.latency.%d", b.cfg.prefix, i)
		dname := fmt.Sprintf("%s.direct.%d", b.cfg.prefix, i)
		var token, dtoken int64
		for _, op := range ops {
			service := func() error {
				var a answer
				var err error
				switch op {
				case "acquire":
					a, err = must(b.svc.acquire(ctx, base, name, holder, ttl, 0))
					token = a.lease.FencingToken
				case "renew":
					_, err = must(b.svc.renew(ctx, base, name, holder, token))
				default:
					_, err = must(b.svc.release(ctx, base, name, holder, token))
				}
				return err
			}
			direct := func() error {
				var err error
				switch op {
				case "acquire":
					dtoken, err = b.direct.acquire(ctx, dname, holder, ttl)
				case "renew":
					err = b.direct.renew(ctx, dname, holder, dtoken)
				default:
					err = b.direct.release(ctx, dname, holder, dtoken)
				}
				return err
			}
			type step struct {
				to  *series
				run func() error
			}
			steps := []step{{ptr(svc, op), service}}
			if b.direct != nil {
				steps = append(steps, step{ptr(dir, op), direct})
			}
			if mini != nil && op == "renew" { // the minimal transaction: the renew's floor
				steps = append(steps, step{&minimal, func() error { return mini.minimal(ctx, dname) }})
			}
			rand.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
			for _, st := range steps {
				start := time.Now()
				if err := st.run(); err != nil {
					return nil, fmt.Errorf("%s: %w", op, err)
				}
				if keep {
					*st.to = append(*st.to, time.Since(start))
				}
			}
		}
		start := time.Now()
		if err := b.svc.healthz(ctx, base); err != nil {
			return nil, err
		}
		if keep {
			hop = append(hop, time.Since(start))
		}
		b.progress(false, "latency: %d/%d rounds", i+1, latencyWarmUp+b.cfg.n)
	}
	var rows []row
	for _, op := range ops {
		for _, p := range []struct {
			name string
			q    float64
		}{{"p50", 0.50}, {"p99", 0.99}} {
			metric := op + " " + p.name
			if b.direct == nil {
				rows = append(rows, row{Scenario: "latency", Metric: metric, Unit: "ms", Service: ptr(svc, op).q(p.q), N: len(*ptr(svc, op)), Note: "memory backend: no direct path"})
				continue
			}
			rows = append(rows, pair("latency", metric, "ms", ptr(svc, op).q(p.q), ptr(dir, op).q(p.q), len(*ptr(svc, op))))
		}
	}
	if b.direct != nil { // the service's own cost: its p50 less the HTTP round trip that any HTTP service adds
		for _, op := range ops {
			rows = append(rows, pair("latency", op+" p50 less the HTTP round trip", "ms", ptr(svc, op).q(0.5)-hop.q(0.5), ptr(dir, op).q(0.5), len(*ptr(svc, op))))
		}
	}
	if len(minimal) > 0 { // the store's per-operation cost: what the service adds beyond the round trip over the minimal transaction
		rows = append(rows,
			row{Scenario: "latency", Metric: "minimal transaction p50", Unit: "ms", Service: minimal.q(0.5), N: len(minimal),
				Note: "SELECT CURRENT_TIMESTAMP(), ReadRow, InsertOrUpdate with a commit timestamp; table indexed on its expiry"},
			pair("latency", "renew p50 less the HTTP round trip, over the minimal transaction", "ms", ptr(svc, "renew").q(0.5)-hop.q(0.5), minimal.q(0.5), len(minimal)),
			row{Scenario: "latency", Metric: "renew p50 beyond the HTTP round trip and the minimal transaction", Unit: "ms",
				Service: ptr(svc, "renew").q(0.5) - hop.q(0.5) - minimal.q(0.5), N: len(minimal), Note: "goal ≤ 0.2 ms (docs/spanner.md#per-operation-cost)"})
	}
	rows = append(rows,
		row{Scenario: "latency", Metric: "HTTP round trip (GET /healthz) p50", Unit: "ms", Service: hop.q(0.5), N: len(hop)},
		row{Scenario: "latency", Metric: "HTTP round trip (GET /healthz) p99", Unit: "ms", Service: hop.q(0.99), N: len(hop)})
	return rows, nil
}

// ptr returns where m keeps the series of op, made when missing.
func ptr(m map[string]*series, op string) *series {
	if m[op] == nil {
		m[op] = new(series)
	}
	return m[op]
}
