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
	window        time.Duration // how long memory is sampled once the connections are open
	mixes         []mix
	budgets       []budget
}

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
	fs.DurationVar(&c.window, "window", 20*time.Second, "how long memory is sampled once the connections are open")
	mixNames := fs.String("mixes", "prefix,single,lists,unopened,nonreading,all", "the mixes to run")
	budgetNames := fs.String("budgets", "off,defaults", "the memory budgets to run them under: off (1 TiB, as before issue 37), defaults")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.binaries = fs.Args()
	for _, n := range strings.Split(*mixNames, ",") {
		i := slices.IndexFunc(mixes, func(m mix) bool { return m.name == n })
		if i < 0 {
			return c, fmt.Errorf("-mixes: no mix %q (prefix, single, lists, unopened, nonreading, all)", n)
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
	if err := auth.Write(dir, c.principals+1); err != nil {
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
	fmt.Fprintf(stdout, "%d leases of 32 KiB; %d principals, each %d prefix streams and %d single-lease watches; %d list readers of %d-lease pages; "+
		"%d upgraded session sockets that send nothing; %d session sockets asking %d times a second for a 33 KB answer; "+
		"all spread over the principals, none reading; %d leases churned; %v window\n\n",
		c.leases, c.principals, c.prefixPer, c.singlePer, c.listers, c.pageSize, c.sockets, c.nonreading, c.rate, c.churn, c.window)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "binary\tbudget\tmix\tRSS before (MiB)\tpeak (MiB)\tgrowth at peak (MiB)\tgrowth at end (MiB)\tconnections\tanswers\tclosed by the end\tchurn turns\tanother principal's prefix stream\tunopened sockets: upgraded / refused / closed (within header timeout + 6 s)\tnon-reading sockets: opened / refused / how they ended\t")
	for _, r := range out {
		legit := fmt.Sprintf("live after %d snapshots", r.legitSnapshots)
		if r.legitFailure != "" {
			legit = fmt.Sprintf("%s after %d snapshots", r.legitFailure, r.legitSnapshots)
		}
		unopened, nonreading := "-", "-"
		if u := r.unopened; u != nil {
			unopened = fmt.Sprintf("%d / %s / %d (%d)", u.Upgraded, orNone(u.Refused(" ")), u.Gone, u.Ended)
		}
		if r.nonreadingRan {
			nonreading = fmt.Sprintf("%d / %s / %s", r.nonreadingOpened, orNone(sockmix.Counts(r.nonreadingRefused, " ")), sockmix.Counts(r.nonreadingEnded, " "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%.0f\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t\n", r.binary, r.budget, r.mix, r.base, r.peak, r.peak-r.base, r.end-r.base,
			r.connections, statuses(r.statuses), r.closed, r.turns, legit, unopened, nonreading)
	}
	return tw.Flush()
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
