// Command slowreaders measures what clients that do not read cost a
// leasesvc instance in memory, and what the instance refuses them
// (docs/security.md, "One memory budget"; docs/contract.md §16). For each
// leasesvc binary it is given, each memory budget (-budgets: off, a budget
// no client reaches, as before issue 37; defaults) and each mix (-mixes)
// it starts a fresh instance (memory backend, static tokens for
// -principals principals and one more, no rate limit, a free port), stores
// -leases leases of 32 KiB (16 KiB of metadata and of checkpoint, the most
// of each, of characters an HTML-escaping encoder makes six times larger)
// and notes the process's resident memory (VmRSS). Then, while -churn
// leases are acquired and released (16 KiB of metadata) all along, the
// mix's clients connect, each with a 4 KiB receive buffer, and none reads
// a byte:
//
//   - prefix: -prefix prefix :watch streams of every lease per principal;
//   - single: -single :watch streams of a churned lease per principal;
//   - lists: -lists list readers in all, of -page-size-lease pages;
//   - all: all of them at once.
//
// For -window it samples the resident memory every 100 ms; then it notes
// the answers' status codes (what the instance refused at the start), how
// many connections the instance has closed (streams ended with an
// overflow event, writes timed out), and whether a principal that opened
// nothing still gets a prefix stream of every lease to its live mark.
//
//	go build -o /tmp/leasesvc ./cmd/leasesvc
//	go run ./cmd/leasebench/slowreaders /tmp/leasesvc
//
// Each instance runs with the environment of this command (GOMEMLIMIT
// included), then the budget's settings.
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
