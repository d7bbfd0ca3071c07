// Command leasebench measures leasesvc: it runs scenarios against one or more
// running leasesvc instances and, for comparison, does the same work
// directly against the backend (a Firestore read and conditional write, a
// Spanner read-write transaction, a PostgreSQL transaction) in the same run, interleaved with the
// service's operations so that noise on a shared machine hits both.
//
// Scenarios (-scenarios, comma-separated; default all):
//
//	latency     uncontended acquire, renew and release: service vs direct, p50/p99
//	contention  -contenders goroutines hammering acquire on one held lease
//	            (-contender-pauses): the holder's renew p50/p99 alone and contended
//	handoff     a release on the first URL until the acquire waiting on the
//	            second URL (waitMs) holds
//	takeover    a holder that stops renewing (a crash): from its expireTime until
//	            the waiting acquire on the second URL holds, in server time
//	succession  a holder of priority 1 on the first URL renewing with a
//	            checkpoint every -succession-renew; a candidate of priority 10
//	            joins on the second URL with a waiting acquire asking to
//	            preempt; the holder, asked to yield, releases with a
//	            checkpoint: join → the candidate leads, and its steps
//	events      a change on the first URL until a watch stream on the second URL
//	            (or, with -pubsub-topic, a Pub/Sub subscriber) sees its event
//	sessiontakeover  an agent process holding through a session on the
//	            first URL (each of -session-windows) is SIGKILLed; a
//	            candidate waits on the second URL: kill → the candidate
//	            holds; side by side with the same takeover of agents on
//	            plain renewals (each TTL of -session-compare-ttls)
//	sessionwrites  backend writes per held lease per minute, counted (on
//	            PostgreSQL, by a row trigger leasebench adds for the
//	            scenario): sessions at window 1 s against plain TTL 1 s
//	sessionfailover  -failover-sessions sessions × -failover-leases leases
//	            on one instance (started from -leasesvc), a second one
//	            running; the first is SIGKILLed or SIGTERMed (in turn);
//	            the agents resume on the second: does every lease keep its
//	            holder and token; -failover-runs runs
//	sessionscale  -sessions sessions of one lease each at -scale-window
//	            against one instance (started from -leasesvc) for
//	            -scale-duration: how many expired, the instance's CPU per
//	            1,000 heartbeats and memory per session
//	throughput  N agents (-agents 1000,10000) each holding its own lease,
//	            renewing at TTL/3 (-ttl) for -duration: renewals/s, p50/p99, lost holdings
//
// Without -scenarios, all but the session scenarios run. They run in this order; throughput is last because the burst of events
// that thousands of new holdings make can delay the events of any scenario
// run after it. A scenario that fails is reported and the others still run.
//
// Output is a table for people, or JSON with -json; progress goes to stderr.
// The direct comparison reads the backend's settings from the environment,
// as leasesvc does (LEASESVC_BACKEND, LEASESVC_PROJECT,
// LEASESVC_FIRESTORE_DATABASE, LEASESVC_SPANNER_DATABASE,
// LEASESVC_POSTGRES_URL, and the emulator hosts); with the memory backend
// there is nothing to compare with.
//
// Examples:
//
//	leasebench -url http://127.0.0.1:8080
//	LEASESVC_BACKEND=firestore LEASESVC_PROJECT=p FIRESTORE_EMULATOR_HOST=127.0.0.1:8681 \
//	  leasebench -url http://127.0.0.1:8080,http://127.0.0.1:8081 -agents 1000,10000 -json
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if spec := os.Getenv(agentEnv); spec != "" { // a child process of sessiontakeover
		os.Exit(agentMain(spec))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "leasebench:", err)
		os.Exit(1)
	}
}
