// Command leasesoak runs leasesvc for a long time under a steady lease load
// and watches its resources: it starts the leasesvc binary on the memory
// backend, has -agents simulated agents hold -leases leases between them
// (each agent renews each of its leases every TTL/3), and samples the
// process every -sample: resident memory, CPU, threads, open files, and the
// renewals served. At the end it asks the process for a goroutine dump
// (SIGQUIT) and counts the goroutines.
//
// It reports steady-state RSS, CPU per 1,000 renewals, and whether anything
// grows over time (RSS, threads, open files: a least-squares slope over the
// samples after the first quarter of the run), as a table or, with -json,
// as JSON. Progress goes to stderr. It needs Linux (/proc).
//
//	go build -o /tmp/leasesvc ./cmd/leasesvc
//	go run ./cmd/leasesoak -bin /tmp/leasesvc -duration 10m
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasesoak:", err)
		os.Exit(1)
	}
}
