package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/sockmix"
)

// config is the command's flags.
type config struct {
	binaries      []string      // leasesvc binaries, measured in turn
	leases        int           // leases of 32 KiB stored
	principals    int           // principals whose clients never read
	prefixPer     int           // prefix streams per principal
	singlePer     int           // single-lease watches per principal
	listers       int           // list readers in all
	churn         int           // leases acquired and released all along
	pageSize      int           // the list readers' pageSize
	sockets       int           // upgraded session sockets that send nothing, in all
	nonreading    int           // session sockets that stop reading, in all
	rate          int           // requests per second of each non-reading socket
	headerTimeout time.Duration // the instances' LEASESVC_HEADER_TIMEOUT
	window        time.Duration // how long the mix runs once its clients are open

	edgePrincipals int           // principals of issue 45's clients
	halfframes     int           // session sockets that send the start of a 1 MiB frame
	halfOpen       bool          // they open a session first
	frameBytes     int           // the bytes of the frame they send
	bigheaders     int           // :watch streams with large headers
	headerBytes    int           // the headers of each (and of each trickled request)
	headerLine     int           // the bytes of each header line
	trickle        int           // unauthenticated connections trickling headers
	trickleOver    time.Duration // how long each takes to send them
	waitsPer       int           // padded waiting acquires per principal
	waitPad        int           // the spaces in each one's metadata
	tableSessions  int           // sessions holding a lease table
	tableLeases    int           // leases in each
	sessionWindow  time.Duration // the window of issue 45's sessions
	goodRate       int           // the good client's acquires per second

	mixes   []mix
	budgets []budget
}

// goodPrincipal is the good client's principal: one that no mix's
// clients and no legitimate reader use.
func (c config) goodPrincipal() int { return max(c.principals+1, c.edgePrincipals) }

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("slowreaders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: slowreaders [flags] LEASESVC_BINARY...")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.leases, "leases", 2000, "leases of 32 KiB to store")
	fs.IntVar(&c.principals, "principals", 10, "principals (static tokens) whose clients never read")
	fs.IntVar(&c.prefixPer, "prefix", 50, "prefix :watch streams per principal, never reading")
	fs.IntVar(&c.singlePer, "single", 50, "single-lease :watch streams per principal, never reading")
	fs.IntVar(&c.listers, "lists", 100, "list readers in all, never reading")
	fs.IntVar(&c.churn, "churn", 100, "leases acquired and released (16 KiB metadata) all along")
	fs.IntVar(&c.pageSize, "page-size", 1000, "the list readers' pageSize")
	fs.IntVar(&c.sockets, "sockets", 6000, "upgraded session sockets in all that never send open or resume")
	fs.IntVar(&c.nonreading, "nonreading", 10, "session sockets in all that open a session, then ask for 33 KB answers and read none")
	fs.IntVar(&c.rate, "rate", 150, "requests per second of each non-reading socket (below the message rate, 200)")
	fs.DurationVar(&c.headerTimeout, "header-timeout", 10*time.Second, "the instances' LEASESVC_HEADER_TIMEOUT")
	fs.DurationVar(&c.window, "window", 20*time.Second, "how long the mix runs once its clients are open")
	fs.IntVar(&c.edgePrincipals, "edge-principals", 20, "principals (static tokens) of issue 45's clients")
	fs.IntVar(&c.halfframes, "halfframe", 900, "session sockets in all that send the start of a 1 MiB text frame and stall")
	fs.BoolVar(&c.halfOpen, "halfframe-open", true, "the half-frame sockets open a session first (else they only upgrade)")
	fs.IntVar(&c.frameBytes, "frame-bytes", 1_000_000, "bytes of the 1 MiB frame each half-frame socket sends")
	fs.IntVar(&c.bigheaders, "bigheaders", 1000, "single-lease :watch streams in all whose requests carry -header-bytes of headers, never reading")
	fs.IntVar(&c.headerBytes, "header-bytes", 1_000_000, "bytes of headers of each large-header and trickled request")
	fs.IntVar(&c.headerLine, "header-line", 4000, "bytes of each of their header lines")
	fs.IntVar(&c.trickle, "trickle", 500, "unauthenticated connections that trickle -header-bytes of headers")
	fs.DurationVar(&c.trickleOver, "trickle-over", 8*time.Second, "how long each takes (inside the header timeout)")
	fs.IntVar(&c.waitsPer, "waits", 100, "padded waiting session acquires per principal")
	fs.IntVar(&c.waitPad, "wait-pad", 1_000_000, "spaces inside each padded acquire's metadata")
	fs.IntVar(&c.tableSessions, "table-sessions", 5, "sessions holding a lease table")
	fs.IntVar(&c.tableLeases, "table-leases", 1000, "leases in each, of the longest name and holder")
	fs.DurationVar(&c.sessionWindow, "session-window", time.Minute, "the window of issue 45's sessions (the half frames send no heartbeat)")
	fs.IntVar(&c.goodRate, "good-rate", 20, "the good client's acquires (and releases) per second")
	mixList := fs.String("mixes", "prefix,single,lists,unopened,nonreading,all", "the mixes to run (issue 45's: halfframe,bigheaders,trickleheaders,paddedwaits,paddedwaits1,leasetable,all45)")
	budgetNames := fs.String("budgets", "off,defaults", "the memory budgets to run them under: off (1 TiB, as before issue 37), defaults")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.binaries = fs.Args()
	for _, n := range strings.Split(*mixList, ",") {
		i := slices.IndexFunc(mixes, func(m mix) bool { return m.name == n })
		if i < 0 {
			return c, fmt.Errorf("-mixes: no mix %q (%s)", n, mixNames())
		}
		c.mixes = append(c.mixes, mixes[i])
	}
	for _, n := range strings.Split(*budgetNames, ",") {
		i := slices.IndexFunc(budgets, func(b budget) bool { return b.name == n })
		if i < 0 {
			return c, fmt.Errorf("-budgets: no budget %q (off, defaults)", n)
		}
		c.budgets = append(c.budgets, budgets[i])
	}
	switch {
	case len(c.binaries) == 0:
		fs.Usage()
		return c, errors.New("no leasesvc binary given")
	case c.leases < 1 || c.principals < 1 || c.churn < 1 || c.pageSize < 1 || c.rate < 1 || c.prefixPer < 0 || c.singlePer < 0 || c.listers < 0 ||
		c.sockets < 0 || c.nonreading < 0 || c.window <= 0 || c.headerTimeout <= 0:
		return c, errors.New("-leases, -principals, -churn, -page-size and -rate must be at least 1, -prefix, -single, -lists, -sockets and -nonreading at least 0, -window and -header-timeout positive")
	case c.edgePrincipals < 1 || c.goodRate < 1 || c.halfframes < 0 || c.bigheaders < 0 || c.trickle < 0 || c.waitsPer < 0 || c.waitPad < 0 ||
		c.tableSessions < 0 || c.tableLeases < 0 || c.headerBytes < 0 || c.headerLine < 16 || c.trickleOver <= 0:
		return c, errors.New("-edge-principals and -good-rate must be at least 1, -header-line at least 16, -halfframe, -bigheaders, -trickle, -waits, -wait-pad, -table-sessions, -table-leases and -header-bytes at least 0, -trickle-over positive")
	case c.frameBytes < 0 || c.frameBytes > 1<<20:
		return c, errors.New("-frame-bytes must be between 0 and 1048576 (the frame's declared length)")
	case c.sessionWindow < 200*time.Millisecond || c.sessionWindow > time.Minute:
		return c, errors.New("-session-window must be between 200ms and 1m (docs/contract.md §14)")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "slowreaders")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := auth.Write(dir, c.goodPrincipal()+1); err != nil {
		return err
	}
	var out []result
	for _, bin := range c.binaries {
		for _, b := range c.budgets {
			for _, mx := range c.mixes {
				fmt.Fprintf(stderr, "measuring %s, budget %s, mix %s\n", bin, b.name, mx.name)
				r, err := measure(ctx, c, bin, b, mx, stderr)
				if err != nil {
					return fmt.Errorf("%s, budget %s, mix %s: %w", bin, b.name, mx.name, err)
				}
				out = append(out, r)
			}
		}
	}
	var any37, any45 bool
	for _, mx := range c.mixes {
		any37, any45 = any37 || mx.issue37(), any45 || mx.issue45()
	}
	if any37 {
		fmt.Fprintf(stdout, "Issue 37's mixes: %d leases of 32 KiB; %d principals, each %d prefix streams and %d single-lease watches; %d list readers of %d-lease pages; "+
			"%d upgraded session sockets that send nothing; %d session sockets asking %d times a second for a 33 KB answer; "+
			"all spread over the principals, none reading; %d leases churned.\n",
			c.leases, c.principals, c.prefixPer, c.singlePer, c.listers, c.pageSize, c.sockets, c.nonreading, c.rate, c.churn)
	}
	if any45 {
		how := fmt.Sprintf("open a session (window %v)", c.sessionWindow)
		if !c.halfOpen {
			how = "only upgrade"
		}
		fmt.Fprintf(stdout, "Issue 45's mixes, spread over %d principals: halfframe: %d session sockets %s, then send %d bytes of a text frame declaring 1 MiB and stall; "+
			"bigheaders: %d single-lease :watch streams with %d bytes of headers (lines of %d), unread; trickleheaders: %d unauthenticated connections sending as many headers over %v; "+
			"paddedwaits (all principals) and paddedwaits1 (one): %d waiting session acquires per principal, metadata padded with %d spaces; "+
			"leasetable: %d sessions holding %d leases each, names of 128 characters, holders of 256 (≈ 1 KB); all45: all of them.\n",
			c.edgePrincipals, c.halfframes, how, c.frameBytes, c.bigheaders, c.headerBytes, c.headerLine, c.trickle, c.trickleOver,
			c.waitsPer, c.waitPad, c.tableSessions, c.tableLeases)
	}
	fmt.Fprintf(stdout, "Every mix: a good client (another principal) acquires and releases its own lease over REST %d times a second from the first client opened to the end of the %v window.\n\n",
		c.goodRate, c.window)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	for i, r := range out {
		cols := []struct{ head, cell string }{
			{"binary", r.binary}, {"budget", r.budget}, {"mix", r.mix},
			{"RSS before (MiB)", fmt.Sprintf("%.0f", r.base)}, {"peak (MiB)", fmt.Sprintf("%.0f", r.peak)},
			{"growth at peak (MiB)", fmt.Sprintf("%.0f", r.peak-r.base)}, {"growth at end (MiB)", fmt.Sprintf("%.0f", r.end-r.base)},
			{"clients open after (s)", fmt.Sprintf("%.1f", r.opening.Seconds())},
			{"good client's acquire p99 (ms)", goodP99(r.good)}, {"good client", r.good.summary()},
			{"connections", fmt.Sprint(r.connections)}, {"answers", orNone(statuses(r.statuses))}, {"closed by the end", fmt.Sprint(r.closed)},
		}
		if any37 {
			cols = append(cols, []struct{ head, cell string }{
				{"churn turns", "-"}, {"another principal's prefix stream", "-"},
				{"unopened sockets: upgraded / refused / closed (within header timeout + 6 s)", "-"},
				{"non-reading sockets: opened / refused / how they ended", "-"},
			}...)
			n := len(cols)
			if r.issue37 {
				cols[n-4].cell, cols[n-3].cell = fmt.Sprint(r.turns), fmt.Sprintf("live after %d snapshots", r.legitSnapshots)
				if r.legitFailure != "" {
					cols[n-3].cell = fmt.Sprintf("%s after %d snapshots", r.legitFailure, r.legitSnapshots)
				}
			}
			if u := r.unopened; u != nil {
				cols[n-2].cell = fmt.Sprintf("%d / %s / %d (%d)", u.Upgraded, orNone(u.Refused(" ")), u.Gone, u.Ended)
			}
			if r.nonreadingRan {
				cols[n-1].cell = fmt.Sprintf("%d / %s / %s", r.nonreadingOpened, orNone(sockmix.Counts(r.nonreadingRefused, " ")), sockmix.Counts(r.nonreadingEnded, " "))
			}
		}
		if any45 {
			cols = append(cols, struct{ head, cell string }{"issue 45's clients: refused / closed", orDash(r.edges)})
		}
		var head, row strings.Builder
		for _, col := range cols {
			head.WriteString(col.head + "\t")
			row.WriteString(col.cell + "\t")
		}
		if i == 0 {
			fmt.Fprintln(tw, head.String())
		}
		fmt.Fprintln(tw, row.String())
	}
	return tw.Flush()
}

// goodP99 is the good client's acquire p99 in ms, "-" without acquires.
func goodP99(g goodResult) string {
	if len(g.latencies) == 0 {
		return "-"
	}
	return ms(percentile(g.latencies, 99))
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// orNone is s, or "none" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// statuses renders status counts as "200×480 429×20".
func statuses(m map[int]int) string {
	var codes []int
	for code := range m {
		codes = append(codes, code)
	}
	sort.Ints(codes)
	var parts []string
	for _, code := range codes {
		name := fmt.Sprint(code)
		if code == 0 {
			name = "none"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, m[code]))
	}
	return strings.Join(parts, " ")
}
