// Command sessionsockets measures what session sockets cost a leasesvc
// instance and what it refuses (docs/contract.md §14 Limits,
// docs/performance.md "Session sockets"). It starts each leasesvc binary it
// is given in turn (memory backend, static tokens for -principals
// principals, a free port) and runs the mixes of -mixes on it:
//
//	unopened    -sockets upgraded session sockets spread over the
//	            principals, none sending open or resume: the growth of the
//	            instance's resident memory (VmRSS), the upgrades refused
//	            (by status), and how many the instance closed within the
//	            header timeout (LEASESVC_HEADER_TIMEOUT, 10 s) and 5 s more
//	nonreading  for each count of -nonreading, that many sockets of one
//	            principal open a session and then stop reading while they
//	            ask, -rate times a second each, for answers that carry a
//	            33 KB lease (16 KiB of metadata and of checkpoint: a
//	            lease_held error carries it): memory growth, and the
//	            sockets the instance closed
//	rate        -rate-sockets session sockets of one principal acquire new
//	            leases as fast as the message rate lets them for -duration,
//	            at the default LEASESVC_RATE_LIMIT; then as many REST
//	            callers of the same principal do: acquires served per
//	            second, and refused
//	scale       -scale-sessions sessions at window 1 s over the principals
//	            at the default settings, one lease each, heartbeating for
//	            -duration: opens refused, sessions that lapsed or ended
//
// The instance runs with LEASESVC_RATE_LIMIT=0 except in rate and scale.
// Give the binaries to compare on the command line, for example the one
// built from a commit before this tree and the one built from it:
//
//	git worktree add /tmp/before <commit> && (cd /tmp/before && go build -o /tmp/leasesvc-before ./cmd/leasesvc)
//	go build -o /tmp/leasesvc-after ./cmd/leasesvc
//	go run ./cmd/leasebench/sessionsockets /tmp/leasesvc-before /tmp/leasesvc-after
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
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sessionsockets:", err)
		os.Exit(1)
	}
}
