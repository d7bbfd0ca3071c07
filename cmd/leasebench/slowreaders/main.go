// Command slowreaders measures what clients that do not read cost a
// leasesvc instance in memory (docs/security.md, "Limits and input
// hygiene"): it starts each leasesvc binary it is given in turn (memory
// backend, no authentication, a free port), stores -leases leases of 32 KiB
// (16 KiB of metadata and of checkpoint, the most of each, of characters an
// HTML-escaping encoder makes six times larger), and notes the process's
// resident memory (VmRSS). Then -readers connections each ask for a list page
// of -page-size leases and -streams connections each open a prefix :watch
// stream of every lease, all with a 4 KiB receive buffer, and none reads a
// byte. For -window it samples the resident memory every 100 ms, and prints
// the growth at its peak and at the end, with how many of the connections the
// instance has closed by then; last it reads one page whole, to show its size.
//
// Give the binaries to compare on the command line, for example the one
// built from main and the one built from this tree:
//
//	git worktree add /tmp/main main && (cd /tmp/main && go build -o /tmp/leasesvc-main ./cmd/leasesvc)
//	go build -o /tmp/leasesvc-new ./cmd/leasesvc
//	go run ./cmd/leasebench/slowreaders /tmp/leasesvc-main /tmp/leasesvc-new
//
// Each instance runs with the environment of this command, so settings
// such as LEASESVC_WRITE_TIMEOUT apply to every binary that knows them.
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
		fmt.Fprintln(os.Stderr, "slowreaders:", err)
		os.Exit(1)
	}
}
