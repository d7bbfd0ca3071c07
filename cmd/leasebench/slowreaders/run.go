package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// config is the command's flags.
type config struct {
	binaries []string      // leasesvc binaries, measured in turn
	leases   int           // leases stored
	readers  int           // connections asking for a list page, never reading
	streams  int           // connections opening a prefix stream, never reading
	pageSize int           // the readers' pageSize
	window   time.Duration // how long memory is sampled once the connections are open
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("slowreaders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: slowreaders [flags] LEASESVC_BINARY...")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.leases, "leases", 1000, "leases of 32 KiB to store")
	fs.IntVar(&c.readers, "readers", 10, "connections that ask for a list page and never read")
	fs.IntVar(&c.streams, "streams", 10, "connections that open a prefix :watch stream and never read")
	fs.IntVar(&c.pageSize, "page-size", 1000, "the readers' pageSize")
	fs.DurationVar(&c.window, "window", 10*time.Second, "how long memory is sampled once the connections are open")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.binaries = fs.Args()
	switch {
	case len(c.binaries) == 0:
		fs.Usage()
		return c, errors.New("no leasesvc binary given")
	case c.leases < 1 || c.readers < 0 || c.streams < 0 || c.pageSize < 1 || c.window <= 0:
		return c, errors.New("-leases and -page-size must be at least 1, -readers and -streams at least 0, -window positive")
	}
	return c, nil
}

// result is one binary's measurement, in MiB of resident memory.
type result struct {
	binary              string
	base, peak, end     float64
	closed, connections int // connections the instance closed by the end of the window
	firstPageBytes      int // the encoded size of the first list page, read whole
	firstPageLeases     int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	var out []result
	for _, bin := range c.binaries {
		fmt.Fprintf(stderr, "measuring %s\n", bin)
		r, err := measure(ctx, c, bin, stderr)
		if err != nil {
			return fmt.Errorf("%s: %w", bin, err)
		}
		out = append(out, r)
	}
	fmt.Fprintf(stdout, "%d leases of 32 KiB; %d readers of %d-lease pages and %d prefix streams, none reading; %v window\n\n",
		c.leases, c.readers, c.pageSize, c.streams, c.window)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "binary\tRSS before (MiB)\tpeak (MiB)\tgrowth at peak (MiB)\tgrowth at end (MiB)\tclosed by the end\tfirst page (leases, MiB)\t")
	for _, r := range out {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\t%d of %d\t%d, %.1f\t\n", r.binary, r.base, r.peak, r.peak-r.base, r.end-r.base,
			r.closed, r.connections, r.firstPageLeases, float64(r.firstPageBytes)/(1<<20))
	}
	return tw.Flush()
}
