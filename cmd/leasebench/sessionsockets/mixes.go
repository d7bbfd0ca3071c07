package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/benchinst"
	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/sockmix"
)

// start runs bin with the command's tokens and env added.
func start(ctx context.Context, b *bench, bin string, env []string) (*benchinst.Instance, error) {
	return benchinst.Start(ctx, bin, b.auth, env, b.stderr)
}

// unopened upgrades b.c.sockets sockets that send nothing, and waits up to
// the header timeout and 5 s more for the instance to close them.
func unopened(ctx context.Context, b *bench, bin string) ([]row, error) {
	in, err := start(ctx, b, bin, []string{"LEASESVC_RATE_LIMIT=0"})
	if err != nil {
		return nil, err
	}
	defer in.Stop()
	time.Sleep(time.Second) // settle before the baseline
	base, err := in.RSS()
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	result := in.Sample(stop)
	u := sockmix.OpenUnopened(ctx, in.Addr, b.c.sockets, func(i int) string { return b.auth.Token(i % b.c.principals) }, b.c.headerTimeout)
	u.WaitClosed(ctx)
	close(stop)
	peak, last := result()
	r := u.Result()
	u.Close()
	mix := fmt.Sprintf("unopened %d sockets, %d principals", b.c.sockets, b.c.principals)
	return []row{
		{bin, mix, "upgraded / refused (count×status)", fmt.Sprintf("%d / %s", r.Upgraded, r.Refused(", "))},
		{bin, mix, "RSS before, growth at peak (MiB)", fmt.Sprintf("%.0f, %+.0f", base, peak-base)},
		{bin, mix, "growth at the end (MiB)", fmt.Sprintf("%+.0f", last-base)},
		{bin, mix, fmt.Sprintf("told (error, close frame) within %v + 1 s / connection closed within %v + 6 s", b.c.headerTimeout, b.c.headerTimeout),
			fmt.Sprintf("%d / %d of %d", r.Told, r.Ended, r.Upgraded)},
	}, nil
}

// nonReading runs, for each count, that many sockets of principal 0 that
// stop reading and ask for 33 KB answers.
func nonReading(ctx context.Context, b *bench, bin string) ([]row, error) {
	var rows []row
	for _, n := range b.c.nonreading {
		r, err := nonReadingRun(ctx, b, bin, n)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func nonReadingRun(ctx context.Context, b *bench, bin string, n int) ([]row, error) {
	in, err := start(ctx, b, bin, []string{"LEASESVC_RATE_LIMIT=0"})
	if err != nil {
		return nil, err
	}
	defer in.Stop()
	if err := sockmix.SeedBig(ctx, in.Base, b.auth.Header(0), "big"); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	base, err := in.RSS()
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	result := in.Sample(stop)
	end := make(chan struct{})
	time.AfterFunc(b.c.duration, func() { close(end) })
	nr, err := sockmix.OpenNonReading(ctx, in.Base, n, func(int) http.Header { return b.auth.Header(0) }, "big", b.c.rate, end, false)
	if err != nil {
		close(stop)
		result()
		return nil, err
	}
	defer nr.Close()
	nr.Wait()
	time.Sleep(time.Second)
	close(stop)
	peak, last := result()
	// Now read what each socket was sent, up to 15 s: a socket the
	// instance closed ends with its close status.
	codes := nr.Finish(ctx, 15*time.Second)
	mix := fmt.Sprintf("nonreading %d sockets × %d/s of 33 KB answers, %v", n, b.c.rate, b.c.duration)
	return []row{
		{bin, mix, "RSS before, growth at peak (MiB)", fmt.Sprintf("%.0f, %+.0f", base, peak-base)},
		{bin, mix, "growth at the end (MiB)", fmt.Sprintf("%+.0f", last-base)},
		{bin, mix, "sockets by how they ended (close code, dropped, or still open 15 s later)", sockmix.Counts(codes, ", ")},
	}, nil
}
