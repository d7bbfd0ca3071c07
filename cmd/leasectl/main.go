// Command leasectl drives leasesvc from a shell: acquire, renew, release,
// get, list and watch leases, and run a command only while holding one.
//
//	leasectl acquire NAME --holder H [--ttl 30s] [--wait 0s] [--metadata JSON]
//	leasectl renew   NAME --holder H --token N [--ttl D] [--metadata JSON]
//	leasectl release NAME --holder H --token N
//	leasectl get     NAME
//	leasectl list    [--prefix P] [--page-size N] [--page-token T]
//	leasectl watch   NAME
//	leasectl run     --lease NAME [--ttl 30s] [--holder H] [--grace D] -- CMD ARGS...
//
// Every command prints a human table by default and JSON with --json (one
// object per line for watch). LEASESVC_URL selects the service (default
// http://localhost:8080); --url overrides it.
//
// leasectl run campaigns for the lease and runs CMD only while it leads,
// with LEASE_NAME, LEASE_HOLDER and LEASE_FENCING_TOKEN in CMD's
// environment. When leadership ends (a renew answered lease_lost, or
// renewals failed until 2×grace before the safe deadline) it sends SIGTERM
// to CMD's process group, then SIGKILL after the grace period, so CMD is
// gone at least one grace period before the safe deadline, before anyone
// else can hold the lease. When CMD ends by itself leasectl releases the
// lease and exits with CMD's status. On SIGINT or SIGTERM it stops CMD the
// same way, releases the lease and exits with CMD's status.
//
// Exit status: 0 success; CMD's status for run; 1 an error; 2 bad usage;
// 3 the lease is held by another (acquire); 4 the lease was lost (renew,
// release, or run losing leadership); 5 no such lease (get); 6 the service
// is unavailable.
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
	if err == nil {
		return
	}
	var ex *exitError
	if errors.As(err, &ex) && ex.quiet {
		os.Exit(ex.code)
	}
	fmt.Fprintln(os.Stderr, "leasectl:", err)
	os.Exit(exitCode(err))
}
