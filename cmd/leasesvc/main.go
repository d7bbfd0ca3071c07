// Command leasesvc serves the lease API of docs/contract.md §4 over one
// backend chosen at start-up by name among those registered with package
// backend: memory (the default, for a first run and tests), Firestore,
// Cloud Spanner or PostgreSQL.
//
// Configuration comes from the environment and, overriding it, from flags;
// `leasesvc -h` lists every setting (variable, flag, default, meaning): the
// service's own (settings.go) and those of every registered backend
// (package backend/all), as README.md's table does.
//
// A bad value stops start-up with a message naming it. Logs are JSON lines
// on stdout.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, errHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasesvc:", err)
		os.Exit(1)
	}
}
