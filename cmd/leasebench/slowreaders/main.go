// Command slowreaders measures what clients that do not read (issue 37),
// and clients whose bytes enter where no budget charges them (issue 45),
// cost a leasesvc instance in memory, and what the instance refuses them
// (docs/security.md, "One memory budget"; docs/contract.md §16). For each
// leasesvc binary it is given, each memory budget (-budgets: off, a budget
// no client reaches, as before issue 37; defaults) and each mix (-mixes)
// it starts a fresh instance (memory backend, static tokens for the
// principals of the mixes, a legitimate reader and the good client, no
// rate limit, a free port); for issue 37's mixes it stores
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
// Issue 45's mixes need no stored leases and no churn: they send bytes
// where no budget charged them, spread over -edge-principals principals:
//
//   - halfframe: -halfframe session sockets (900; 300 with -halfframe 300)
//     open a session (window -session-window, 1 min; with
//     -halfframe-open=false they only upgrade), then write the header of
//     a masked text frame declaring 1 MiB and the first -frame-bytes
//     (1,000,000) of it, and stall;
//   - bigheaders: -bigheaders single-lease :watch streams whose requests
//     carry -header-bytes (1,000,000) of X-Pad-N headers of -header-line
//     (4,000) bytes each; the answer's status line is read as each is
//     opened, then nothing;
//   - trickleheaders: -trickle connections without credentials that send
//     as many headers evenly over -trickle-over (8 s, inside the header
//     timeout), then end them;
//   - paddedwaits, paddedwaits1: from every principal (or from one), one
//     session sending -waits (100) acquires of a lease another holder
//     holds, each waiting 60 s, metadata padded with -wait-pad (1,000,000)
//     spaces inside the JSON (compacted it is a few bytes);
//   - leasetable: -table-sessions (5) sessions acquiring -table-leases
//     (1,000) leases each, names of 128 characters and holders of 256
//     (nearly all of 4 bytes), held;
//   - all45: all of them at once (the sessions first, the half frames
//     last).
//
// Session frames are written by hand over the TCP connection
// (cmd/leasebench/internal/sockmix), and every session but the half
// frames' heartbeats every window/4 and reads its answers.
//
// In every mix a good client, one more principal, acquires and releases
// a lease of its own over REST -good-rate (20) times a second, from the
// first client opened to the end of the window, and its acquires'
// latencies are noted (an acquire not answered in 30 s counts 30 s).
//
// Resident memory (VmRSS of the instance, from /proc; never this
// command's) is sampled every 100 ms from the first client opened; the
// window (-window) begins once every client is open. Then it notes the
// answers' status codes (what the instance refused at the start), how
// many connections the instance has closed (streams ended with an
// overflow event, writes timed out), the session sockets it refused and
// closed (the unopened ones within the header timeout, the non-reading
// ones with a close code or not), what became of issue 45's clients, and,
// for issue 37's mixes, whether a principal that opened nothing still
// gets a prefix stream of every lease to its live mark. The socket mixes
// of issue 37 are those of cmd/leasebench/sessionsockets.
//
//	git archive 68e1680 | (mkdir -p /tmp/before && tar -x -C /tmp/before)
//	(cd /tmp/before && go build -o /tmp/leasesvc-before ./cmd/leasesvc)
//	go build -o /tmp/leasesvc-after ./cmd/leasesvc
//	go run ./cmd/leasebench/slowreaders -window 15s /tmp/leasesvc-before /tmp/leasesvc-after
//	go run ./cmd/leasebench/slowreaders -window 15s -budgets defaults \
//	    -mixes halfframe,bigheaders,trickleheaders,paddedwaits1,paddedwaits,leasetable,all45 /tmp/leasesvc-before /tmp/leasesvc-after
//	go run ./cmd/leasebench/slowreaders -window 15s -budgets defaults -mixes halfframe -halfframe 300 /tmp/leasesvc-before /tmp/leasesvc-after
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
