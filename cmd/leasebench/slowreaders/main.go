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
// mix's clients connect, spread over the principals, and none reads a
// byte (the REST ones with a 4 KiB receive buffer):
//
//   - prefix: -prefix prefix :watch streams of every lease per principal;
//   - single: -single :watch streams of a churned lease per principal;
//   - lists: -lists list readers in all, of -page-size-lease pages;
//   - unopened: -sockets upgraded session sockets in all that never send
//     open or resume;
//   - nonreading: -nonreading session sockets in all that open a session,
//     then ask -rate times a second to acquire a lease of 33 KB that
//     another holds (16 KiB of metadata and of checkpoint: the lease_held
//     error carries it) and read none of the answers;
//   - all: all of them at once (the non-reading sockets open first, the
//     unopened ones last).
//
// For -window it samples the resident memory every 100 ms; then it notes
// the answers' status codes (what the instance refused at the start), how
// many connections the instance has closed (streams ended with an
// overflow event, writes timed out), the session sockets it refused and
// closed (the unopened ones within the header timeout, the non-reading
// ones with a close code or not), and whether a principal that opened
// nothing still gets a prefix stream of every lease to its live mark.
// The socket mixes are those of cmd/leasebench/sessionsockets
// (cmd/leasebench/internal/sockmix).
//
//	git archive 68e1680 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
//	(cd /tmp/before && go build -o /tmp/leasesvc-before ./cmd/leasesvc)
//	go build -o /tmp/leasesvc-after ./cmd/leasesvc
//	go run ./cmd/leasebench/slowreaders -window 15s /tmp/leasesvc-before /tmp/leasesvc-after
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
