package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/benchinst"
)

// config is the command's flags.
type config struct {
	binaries      []string
	mixes         []string
	principals    int
	sockets       int   // unopened
	nonreading    []int // socket counts of the nonreading mix
	rate          int   // requests per second of each nonreading socket
	rateSockets   int
	scaleSessions int
	duration      time.Duration
	headerTimeout time.Duration // the instance's LEASESVC_HEADER_TIMEOUT (its default)
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	var mixes, nonreading string
	fs := flag.NewFlagSet("sessionsockets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sessionsockets [flags] LEASESVC_BINARY...")
		fs.PrintDefaults()
	}
	fs.StringVar(&mixes, "mixes", "unopened,nonreading,rate,scale", "mixes to run, comma-separated")
	fs.IntVar(&c.principals, "principals", 10, "principals (static tokens) the sockets are spread over")
	fs.IntVar(&c.sockets, "sockets", 6000, "unopened: upgraded sockets")
	fs.StringVar(&nonreading, "nonreading", "10,40", "nonreading: counts of sockets of one principal that stop reading")
	fs.IntVar(&c.rate, "rate", 150, "nonreading: requests per second of each socket (below the message rate, 200)")
	fs.IntVar(&c.rateSockets, "rate-sockets", 20, "rate: session sockets of one principal")
	fs.IntVar(&c.scaleSessions, "scale-sessions", 900, "scale: sessions at window 1 s")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long the nonreading, rate and scale mixes run")
	fs.DurationVar(&c.headerTimeout, "header-timeout", 10*time.Second, "the instances' LEASESVC_HEADER_TIMEOUT")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	c.binaries = fs.Args()
	c.mixes = strings.Split(mixes, ",")
	for _, f := range strings.Split(nonreading, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-nonreading %q: want positive counts", nonreading)
		}
		c.nonreading = append(c.nonreading, n)
	}
	switch {
	case len(c.binaries) == 0:
		fs.Usage()
		return c, errors.New("no leasesvc binary given")
	case c.principals < 1 || c.sockets < 0 || c.rate < 1 || c.rateSockets < 1 || c.scaleSessions < 0 || c.duration <= 0:
		return c, errors.New("-principals, -rate and -rate-sockets must be at least 1, -sockets and -scale-sessions at least 0, -duration positive")
	}
	for _, m := range c.mixes {
		if !slices.Contains([]string{"unopened", "nonreading", "rate", "scale"}, m) {
			return c, fmt.Errorf("unknown mix %q", m)
		}
	}
	return c, nil
}

// row is one line of the report.
type row struct {
	binary, mix, metric, value string
}

// mix runs one mix against instances of a binary.
type mix func(ctx context.Context, b *bench, bin string) ([]row, error)

// bench is what the mixes share.
type bench struct {
	c      config
	auth   *benchinst.Auth
	stderr io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "sessionsockets")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Principal i's token is "sessionsockets-token-<i>-…".
	b := &bench{c: c, auth: &benchinst.Auth{Tool: "sessionsockets"}, stderr: stderr}
	if err := b.auth.Write(dir, c.principals); err != nil {
		return err
	}
	mixes := map[string]mix{"unopened": unopened, "nonreading": nonReading, "rate": rateMix, "scale": scaleMix}
	var rows []row
	// The binaries take turns within each mix, so that both see the same
	// machine at nearly the same time.
	for _, m := range c.mixes {
		for _, bin := range c.binaries {
			fmt.Fprintf(stderr, "%s: %s\n", m, bin)
			r, err := mixes[m](ctx, b, bin)
			rows = append(rows, r...)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", m, bin, err)
			}
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "binary\tmix\tmetric\tvalue")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.binary, r.mix, r.metric, r.value)
	}
	return tw.Flush()
}
