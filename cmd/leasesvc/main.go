// Command leasesvc serves the lease API of SPEC §4 over one backend chosen at
// start-up: memory (the default, for a first run and tests), Firestore or
// Cloud Spanner.
//
// Configuration comes from the environment and, overriding it, from flags:
//
//	PORT                   -port      listen port (Cloud Run sets it; default 8080)
//	LEASESVC_BACKEND       -backend   memory | firestore | spanner (default memory)
//	LEASESVC_MIN_TTL       -min-ttl   shortest TTL a holder may ask for (default 1s)
//	LEASESVC_MAX_TTL       -max-ttl   longest TTL a holder may ask for (default 1h)
//	LEASESVC_LOG_LEVEL     -log-level debug | info | warn | error (default info)
//	LEASESVC_DRAIN_TIMEOUT -drain     how long SIGTERM waits for in-flight requests (default 5s)
//	LEASESVC_TELEMETRY     -telemetry none | stdout | otlp (default none)
//	LEASESVC_PUBSUB_TOPIC             leadership events topic (unset: no events)
//	LEASESVC_INSTANCE_ID              this instance's name (default host name + random)
//
// and, per backend, LEASESVC_PROJECT, LEASESVC_FIRESTORE_DATABASE,
// LEASESVC_FIRESTORE_COLLECTION, LEASESVC_SPANNER_DATABASE,
// LEASESVC_SPANNER_MIGRATE and LEASESVC_SPANNER_FAST_PATH (README.md), and
// the limits of docs/contract.md §9: LEASESVC_LISTEN, LEASESVC_HEADER_TIMEOUT,
// LEASESVC_BODY_TIMEOUT, LEASESVC_IDLE_TIMEOUT, LEASESVC_MAX_STREAMS[_PER_CALLER],
// LEASESVC_STREAM_LIFETIME, LEASESVC_MAX_WAITING[_PER_CALLER],
// LEASESVC_READY_CACHE, LEASESVC_PAGE_TOKEN_KEY and LEASESVC_SHUTDOWN_TIMEOUT.
//
// A bad value stops start-up with a message naming it. Logs are JSON lines
// on stdout.
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
		fmt.Fprintln(os.Stderr, "leasesvc:", err)
		os.Exit(1)
	}
}
