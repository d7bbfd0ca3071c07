package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/benchinst"
	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/sockmix"
)

// mix is one scenario: which kinds of clients it opens.
type mix struct {
	name string
	// Issue 37's clients, which never read.
	prefix, single, lists, unopened, nonreading bool
	// Issue 45's, whose bytes enter where no budget charged them: half
	// frames, streams with large headers, trickled headers, a lease
	// table; waits is how many principals send padded waiting acquires
	// (-1: -edge-principals, 0: none).
	halfframe, bigheaders, trickle, leasetable bool
	waits                                      int
}

// issue37 reports whether the mix has issue 37's clients: those run on
// the stored leases, with churn, and another principal's prefix stream
// is read at the end.
func (m mix) issue37() bool { return m.prefix || m.single || m.lists || m.unopened || m.nonreading }

// issue45 reports whether the mix has issue 45's clients.
func (m mix) issue45() bool {
	return m.halfframe || m.bigheaders || m.trickle || m.leasetable || m.waits != 0
}

// mixes are the scenarios of issue 37 and of issue 45, each alone and all
// of each issue at once.
var mixes = []mix{
	{name: "prefix", prefix: true},
	{name: "single", single: true},
	{name: "lists", lists: true},
	{name: "unopened", unopened: true},
	{name: "nonreading", nonreading: true},
	{name: "all", prefix: true, single: true, lists: true, unopened: true, nonreading: true},
	{name: "halfframe", halfframe: true},
	{name: "bigheaders", bigheaders: true},
	{name: "trickleheaders", trickle: true},
	{name: "paddedwaits", waits: -1},
	{name: "paddedwaits1", waits: 1},
	{name: "leasetable", leasetable: true},
	{name: "all45", halfframe: true, bigheaders: true, trickle: true, leasetable: true, waits: -1},
}

// mixNames lists the mixes' names, for messages.
func mixNames() string {
	names := make([]string, len(mixes))
	for i, m := range mixes {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
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
	statuses            map[int]int   // answers' status codes (0: none came)
	closed              int           // connections the instance closed by the end of the window
	turns               int           // churn turns (two changes each)
	legitSnapshots      int           // snapshots a reading prefix stream of another principal got
	legitFailure        string        // why it did not go live; "" when it did
	issue37             bool          // the mix had issue 37's clients (stored leases, churn, the prefix stream read)
	good                goodResult    // the good client's acquires
	edges               string        // what the instance did with issue 45's clients; "" when the mix has none
	opening             time.Duration // from the first client opened to the last (the window begins then)

	unopened          *sockmix.UnopenedResult // the unopened session sockets; nil when the mix has none
	nonreadingRan     bool                    // the mix had non-reading session sockets
	nonreadingOpened  int                     // non-reading sockets that opened a session
	nonreadingRefused map[string]int          // non-reading sockets refused, by upgrade status ("open": the open)
	nonreadingEnded   map[string]int          // opened ones by how they ended: close status, "dropped", "open"
}

// bigLease is the lease, of 33 KB, that the non-reading session sockets
// ask to acquire: held by principal 0, so each answer carries it.
const bigLease = "big"

// measure runs one binary through one mix under one budget: a fresh
// instance (no rate limit); for issue 37's clients the leases stored and
// churn changing holdings all along; the good client acquiring and
// releasing its own lease from the first client opened to the window's
// end; the mix's clients; the window. Issue 37's non-reading session
// sockets open first, then the REST clients, then the unopened sockets,
// which can take every session slot; issue 45's clients after them
// (openEdges). Resident memory is sampled every 100 ms from the first
// client opened.
func measure(ctx context.Context, c config, bin string, b budget, mx mix, stderr io.Writer) (result, error) {
	r := result{binary: bin, budget: b.name, mix: mx.name, statuses: map[int]int{}, issue37: mx.issue37()}
	in, err := benchinst.Start(ctx, bin, auth, append([]string{"LEASESVC_RATE_LIMIT=0"}, b.env...), stderr)
	if err != nil {
		return r, err
	}
	defer in.Stop()
	if r.issue37 {
		if err := seed(ctx, in.Base, c.leases); err != nil {
			return r, err
		}
	}
	if mx.nonreading {
		if err := sockmix.SeedBig(ctx, in.Base, auth.Header(0), bigLease); err != nil {
			return r, err
		}
	}
	if r.base, err = in.RSS(); err != nil {
		return r, err
	}
	stopSampling := make(chan struct{})
	sampled := in.Sample(stopSampling)
	sampling := true
	endSampling := func() {
		if sampling {
			close(stopSampling)
			peak, last := sampled()
			r.peak, r.end, sampling = max(r.base, peak), last, false
		}
	}
	defer endSampling()
	opening := time.Now()
	mixCtx, endMix := context.WithCancel(ctx) // ends the good client and the trickling
	defer endMix()
	goodDone := make(chan goodResult, 1)
	go func() { goodDone <- goodClient(mixCtx, in.Base, tokenOf(c.goodPrincipal()), c.goodRate) }()
	goodRunning := true
	stopGood := func() {
		if goodRunning {
			endMix()
			r.good, goodRunning = <-goodDone, false
		}
	}
	defer stopGood()
	stop := func() {}
	if r.issue37 {
		churnCtx, stopChurn := context.WithCancel(ctx)
		turns := make(chan int, 1)
		go func() { turns <- churn(churnCtx, in.Base, c.churn, stderr) }()
		churned := false
		stop = func() {
			if !churned {
				stopChurn()
				r.turns, churned = <-turns, true
			}
		}
		defer stop()
	}
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			_ = conn.Close()
		}
	}()
	var nr *sockmix.NonReading
	stopAsking := make(chan struct{})
	asking := true
	stopNonReading := func() {
		if asking {
			close(stopAsking)
			asking = false
			if nr != nil {
				nr.Wait()
			}
		}
	}
	defer func() {
		stopNonReading()
		if nr != nil {
			nr.Close()
		}
	}()
	if mx.nonreading {
		header := func(i int) http.Header { return auth.Header(i % c.principals) }
		if nr, err = sockmix.OpenNonReading(ctx, in.Base, c.nonreading, header, bigLease, c.rate, stopAsking, true); err != nil {
			return r, err
		}
	}
	open := func(path string, p int) error {
		conn, err := stalled(in.Addr, path, tokenOf(p))
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
	var u *sockmix.Unopened
	if mx.unopened {
		u = sockmix.OpenUnopened(ctx, in.Addr, c.sockets, func(i int) string { return tokenOf(i % c.principals) }, c.headerTimeout)
		defer u.Close()
	}
	var edges *edgeClients
	var edgeConns []net.Conn
	var edgeAnswers map[int]int
	if mx.issue45() {
		edges, err = openEdges(mixCtx, c, in.Base, in.Addr, mx)
		defer edges.close()
		if err != nil {
			return r, err
		}
		edgeConns, edgeAnswers = edges.conns()
	}
	r.connections = len(conns) + len(edgeConns)
	r.opening = time.Since(opening)
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(c.window):
	}
	endSampling()
	stopGood()
	stop()
	stopNonReading()
	if edges != nil {
		r.edges = edges.summary(in.Addr)
	}
	if u != nil {
		ur := u.Result()
		r.unopened = &ur
	}
	openNow, err := established(in.Addr, append(slices.Clip(conns), edgeConns...))
	if err != nil {
		return r, err
	}
	r.closed = r.connections - openNow
	r.statuses = statusesOf(conns)
	for st, n := range edgeAnswers {
		r.statuses[st] += n
	}
	if nr != nil {
		// What each socket was sent until the instance closed it, if it
		// did, is read in 5 s at most.
		r.nonreadingRan, r.nonreadingOpened, r.nonreadingRefused = true, nr.Opened(), nr.Refused()
		r.nonreadingEnded = nr.Finish(ctx, 5*time.Second)
	}
	if r.issue37 {
		// A principal that opened nothing reads a prefix stream of every
		// lease while the others' clients still hang on.
		r.legitSnapshots, r.legitFailure = legit(ctx, in.Base, tokenOf(c.principals))
		if m, err := in.RSS(); err == nil {
			r.peak = max(r.peak, m)
		}
	}
	return r, nil
}
