package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// mix is one scenario: which kinds of clients that never read it opens.
type mix struct {
	name                  string
	prefix, single, lists bool
}

// mixes are the scenarios of issue 37, each alone and all at once.
var mixes = []mix{
	{name: "prefix", prefix: true},
	{name: "single", single: true},
	{name: "lists", lists: true},
	{name: "all", prefix: true, single: true, lists: true},
}

// budget is a setting of the memory budget the scenarios run under.
type budget struct {
	name string
	env  []string
}

// budgets: "off" is a budget no client reaches (1 TiB, and so no soft
// memory limit either), as before issue 37; "defaults" sets nothing.
var budgets = []budget{
	{name: "off", env: []string{"LEASESVC_MEMORY_BUDGET=1099511627776", "LEASESVC_MEMORY_PER_CALLER=1099511627776", "GOMEMLIMIT=off"}},
	{name: "defaults"},
}

// result is one measurement, in MiB of resident memory.
type result struct {
	binary, budget, mix string
	base, peak, end     float64
	connections         int
	statuses            map[int]int // answers' status codes (0: none came)
	closed              int         // connections the instance closed by the end of the window
	turns               int         // churn turns (two changes each)
	legitSnapshots      int         // snapshots a reading prefix stream of another principal got
	legitFailure        string      // why it did not go live; "" when it did
}

// measure runs one binary through one mix under one budget: a fresh
// instance, the leases stored, then the mix's clients from c.principals
// principals, none reading, while churn changes holdings, for the window.
func measure(ctx context.Context, c config, bin string, b budget, mx mix, tokens, policy string, stderr io.Writer) (result, error) {
	r := result{binary: bin, budget: b.name, mix: mx.name, statuses: map[int]int{}}
	in, err := start(ctx, bin, tokens, policy, b.env, stderr)
	if err != nil {
		return r, err
	}
	defer in.stop()
	if err := seed(ctx, in.base, c.leases); err != nil {
		return r, err
	}
	if r.base, err = in.rss(); err != nil {
		return r, err
	}
	churnCtx, stopChurn := context.WithCancel(ctx)
	turns := make(chan int, 1)
	go func() { turns <- churn(churnCtx, in.base, c.churn, stderr) }()
	churned := false
	stop := func() {
		if !churned {
			stopChurn()
			r.turns, churned = <-turns, true
		}
	}
	defer stop()
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			_ = conn.Close()
		}
	}()
	open := func(path string, p int) error {
		conn, err := stalled(in.addr, path, tokenOf(p))
		if err == nil {
			conns = append(conns, conn)
		}
		return err
	}
	for p := range c.principals {
		for range c.prefixPer {
			if mx.prefix {
				if err := open("/v1/leases:watch?prefix=slow.", p); err != nil {
					return r, err
				}
			}
		}
		for i := range c.singlePer {
			if mx.single {
				if err := open(fmt.Sprintf("/v1/leases/slow.churn.%03d:watch", (p*c.singlePer+i)%c.churn), p); err != nil {
					return r, err
				}
			}
		}
	}
	if mx.lists {
		for i := range c.listers {
			if err := open(fmt.Sprintf("/v1/leases?prefix=slow.&pageSize=%d", c.pageSize), i%c.principals); err != nil {
				return r, err
			}
		}
	}
	r.connections = len(conns)
	r.peak = r.base
	end := time.Now().Add(c.window)
	for time.Now().Before(end) {
		m, err := in.rss()
		if err != nil {
			return r, err
		}
		r.peak, r.end = max(r.peak, m), m
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	openNow, err := established(in.addr, conns)
	if err != nil {
		return r, err
	}
	r.closed = len(conns) - openNow
	for _, conn := range conns {
		r.statuses[status(conn)]++
	}
	// A principal that opened nothing reads a prefix stream of every
	// lease while the others' clients still hang on.
	r.legitSnapshots, r.legitFailure = legit(ctx, in.base, tokenOf(c.principals))
	if m, err := in.rss(); err == nil {
		r.peak = max(r.peak, m)
	}
	return r, nil
}
