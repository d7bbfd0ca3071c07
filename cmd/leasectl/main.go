// Command leasectl drives leasesvc from a shell: acquire, renew, release,
// transfer, get, list, watch and delete leases, revoke a holding as an
// operator, and run a command only while holding a lease.
//
//	leasectl acquire  NAME [--holder H] [--ttl 30s] [--wait 0s] [--metadata JSON] [--priority N] [--preempt]
//	leasectl renew    NAME [--holder H] --fencing-token N [--ttl D] [--metadata JSON] [--checkpoint JSON]
//	leasectl release  NAME [--holder H] --fencing-token N [--checkpoint JSON]
//	leasectl transfer NAME [--holder H] --fencing-token N --to H2 [--checkpoint JSON] [--reserve 5s]
//	leasectl revoke   NAME --reason R [--fencing-token N]
//	leasectl delete  NAME
//	leasectl get     NAME
//	leasectl list    [--prefix P] [--page-size N] [--page-token T]
//	leasectl watch   NAME [--missing-ok] | --prefix P
//	leasectl run     NAME [--window 1s] [--holder H] [--grace D] [--exit-on-loss] [--priority N] [--preempt] -- CMD ARGS...
//	leasectl version
//	leasectl completion bash|zsh|fish
//	leasectl mcp     [--holder H] [--window 1s]  (docs/agents.md)
//
// `leasectl --help` lists the commands and `leasectl COMMAND --help` (or
// `leasectl help COMMAND`) prints a command's usage, flags and an example,
// on stdout, with exit status 0. The commands are one table (commands.go):
// a new subcommand is one entry there, and its help and shell completion
// follow from it.
//
// Commands that print leases print a human table by default and JSON with
// --json (one object per line for watch). LEASESVC_URL selects the service
// (default http://localhost:8080); --url overrides it. Durations take a
// unit (30s, 1m30s, 500ms). The global flags (--url, --token, --token-file,
// --json) come before the command's name or after it: leasectl --url U get
// X and leasectl get X --url U are the same; before it, one the command
// does not take is ignored (so an alias such as leasectl --url U --json
// serves every command).
//
// acquire, renew and release need the holder's identity: --holder, else
// LEASESVC_HOLDER; without either they are a usage error, because a renew
// must repeat the holder that acquired and an invented one would be unknown
// to it. run, a single process for its whole term, defaults to
// {hostname}-{pid}.
//
// watch of a lease that has never been acquired exits 5 (not found);
// --missing-ok waits for its first acquire instead, printing "(no such lease
// yet)", or {"type":"lease","lease":null} with --json.
//
// A mistake on the command line (an unknown flag, a bad or missing value, a
// value the service refuses as invalid_argument) exits 2 with one line
// naming the flag.
//
// # Credentials
//
// A service with authentication wants a bearer token. leasectl sends the
// token of --token, or of the file --token-file names (its content
// trimmed); without these flags, LEASESVC_TOKEN or LEASESVC_TOKEN_FILE. A
// flag beats the environment; giving both of a kind is a usage error.
// Without a token and with an https URL, leasectl sends Google-signed ID
// tokens for the URL when Application Default Credentials can make them
// (on Cloud Run, GCE, GKE, or with a service-account key in
// GOOGLE_APPLICATION_CREDENTIALS); when they cannot, it goes on without
// credentials, and a 401 or 403 answer then comes with a hint. A person
// with gcloud passes --token "$(gcloud auth print-identity-token
// --impersonate-service-account=SA --audiences=URL --include-email)".
// leasectl never prints a token.
//
// The fencing token of renew, release and revoke is --fencing-token (it was
// --token before credentials came; --token is the credential now).
//
// # Revoking
//
// leasectl revoke ends the live holding of a lease as an operator (the
// service's admin verb) and prints the lease after it: not held, revoked
// by whom and why. The holder's next renew fails (leasectl run stops CMD
// then), and the next acquire gets the next fencing token. With
// --fencing-token N it revokes only holding N, and fails with status 4 when
// N is not the live holding: give the token you saw with get, so that a
// newer holding is never revoked by mistake. A lease that is not held is
// printed unchanged. A revoke is retried only when the service did not act
// on it (429, no connection).
//
// # Running a command
//
// leasectl run campaigns for the lease and runs CMD only while it leads,
// with LEASE_NAME, LEASE_HOLDER, LEASE_FENCING_TOKEN and LEASESVC_PROOF
// (the service's signed proof of the holding, docs/contract.md §17; never
// printed) in CMD's environment. When leadership ends (a renew answered lease_lost, or
// renewals failed until 2×grace before the safe deadline) it sends SIGTERM
// to CMD's process group, then SIGKILL after the grace period, so CMD is
// gone at least one grace period before the safe deadline, before anyone
// else can hold the lease; then it campaigns again, as the Electors do (a
// new acquire, a new fencing token), and starts CMD again when it leads,
// unless --exit-on-loss asks it to exit 4. When CMD ends by itself
// leasectl releases the lease and exits with CMD's status. On SIGINT or
// SIGTERM it stops CMD the same way, releases the lease and exits with
// CMD's status. NAME is the lease's name, as for every command; --lease
// NAME is its older spelling, and anything else before -- is refused.
//
// run and mcp hold their leases through a session by default, whose
// heartbeat window is --window, else LEASESVC_WINDOW, else 1s (run: or
// 6×--grace when longer); --ttl applies only with plain renewals
// (--plain-renewals, or a service without sessions), and run says so when
// it is given under a session.
//
// On Linux CMD runs under a guard: leasectl starts itself as a small
// process (guard_linux.go) that starts CMD in a process group of its own,
// is a child subreaper (so every process CMD starts stays its
// descendant), and hears from leasectl, through a pipe, the safe deadline
// after every successful renewal. The guard stops CMD's whole tree
// (SIGTERM to the group and every descendant, SIGKILL after the grace)
// 2×grace before the safe deadline when no renewal extended it (so even a
// frozen leasectl cannot leave a leader running past it), as soon as
// leasectl dies (its pipe closes: SIGKILL, the OOM killer), and when CMD
// ends by itself (what it left running). It removes the term's checkpoint
// directory too. Elsewhere CMD is a direct child of leasectl, in a process
// group of its own, and outlives a leasectl killed outright
// (docs/agents.md §11 says where the guarantee ends).
//
// # Succession
//
// The succession of docs/contract.md §8 is in reach of the shell. acquire
// --wait --priority N waits as a ranked candidate (the best one gets the
// lease when the holding ends), and --preempt asks a holder of a lower
// priority to step down. renew and release --checkpoint JSON record
// progress for the next holder, whose acquire answer carries it. transfer
// ends a holding and reserves the lease for --to: its acquire gets the next
// token and the checkpoint; anyone else's acquire exits 3 meanwhile, as
// for a lease reserved for the best waiting candidate. Tables print a line
// under a lease that is reserved, or whose holder is asked to step down.
//
// run --priority N [--preempt] campaigns as such a candidate. CMD finds the
// checkpoint its term inherited in the file $LEASE_CHECKPOINT_FILE (a JSON
// object; empty when the lease has none; $LEASE_CHECKPOINT_TOKEN is the
// fencing token of the holding that wrote it). CMD records its progress by
// replacing the file with a JSON object of at most 16 KiB, best written
// next to it and renamed over it; run reads the file about every second
// (ttl/6 for short TTLs) and sends a new, valid content with its next
// renewal, and the last content once CMD is gone with its release. A
// leader asked to step down stops CMD as on any end of leadership
// (SIGTERM, SIGKILL after the grace), releases the lease with CMD's last
// checkpoint and exits 4.
//
// # Exit status
//
// 0 success; CMD's status for run (128+signal if it was killed; 127 when
// CMD cannot be started, 130 when interrupted before CMD started); 1 an error; 2 bad usage; 3 the lease is
// held by another, or reserved for another (acquire, delete); 4 the lease was lost
// (renew, release, transfer, revoke of a --fencing-token that is not the
// live holding, run --exit-on-loss losing leadership, or run stepping
// down); 5 no such lease (get, revoke, watch, delete); 6 the service is unavailable,
// or still rate limits the caller (429) after the retries; 7 the service
// refused the credentials (401, or none sent), the caller lacks the
// permission (403: revoke needs the admin verb, delete the delete verb), or no token could be had
// from the token source.
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
	maybeGuard() // leasectl run's guard of CMD is leasectl too
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
