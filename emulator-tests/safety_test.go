package emulatortests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// The safety runs: several instances of the real binary on one backend
// emulator, with leadership events on, and 64 contenders with short TTLs
// spread over the instances, plus one observer per lease reading it every
// 20–60 ms; the contenders use succession (docs/contract.md §8: candidates
// with priorities, some preempting, checkpoints, transfers); 8 more hold
// through sessions (docs/contract.md §14, safety_session_test.go: agents
// killed and frozen, their sockets delayed, cut and blackholed through a
// front proxy per instance, their terms checked against their own
// deadlines; an agent whose socket goes silent or whose deadline passes
// waits to lead again through a resume); and the Go, Python and TypeScript
// SDKs' Electors hold one lease through their shared sessions beside them
// (safety_sdk_test.go). Faults are injected on two tracks: an instance
// killed with SIGKILL and restarted; an instance paused (SIGSTOP longer
// than the agents take to resume elsewhere, then SIGCONT) while session
// agents hold through it (safety_pause_test.go); an instance's connection
// to the emulator delayed, cut and restored, blackholed (through an
// in-process toxiproxy per instance); for one instance per run, its
// backend's answers held back on their way to it, at random and often past
// the session lease TTL (1 s), decided at once and answered late
// (safety_lateanswers_test.go); the Pub/Sub emulator stopped and
// restarted; and on the agents' sockets, through a frame proxy per
// instance that reads the session frames (safety_frames_test.go): frames
// held back and delivered after the agent gave up on their socket and
// resumed elsewhere, resumes replayed on new sockets after a later one took
// the session (each must be refused, never resumed; safety_late_test.go).
// Every answer is recorded with its server times and the history is
// checked exactly (internal/history.Check: no overlap, token order, every
// answer by the rules, nothing acknowledged lost, no stale or lost
// checkpoint, no broken transfer reservation), by an all-pairs check of
// every holding and term against every other of the lease
// (safety_pairs_test.go), and by porcupine as a second opinion.
//
// Each run lasts LEASESVC_SAFETY_DURATION (default 90s, the shortest in
// which every fault is injected once: what CI runs); the longer run:
//
//	LEASESVC_SAFETY_DURATION=10m go test ./emulator-tests -run Safety -timeout 60m -v
//
// They are not parallel: stopping the Pub/Sub emulator would break every
// other test that uses it.

// safetyMinTTL is the instances' LEASESVC_MIN_TTL, and the contenders'
// TTL is twice that.
const safetyMinTTL = 200 * time.Millisecond

func TestSafetyFirestore(t *testing.T) {
	topic, client := eventsTopic(t)
	env := eventsEnv(t, uniqueCollection("safety"), topic)
	delete(env, emulators.FirestoreHostEnv) // each instance reaches the emulator through its proxy
	env["LEASESVC_MIN_TTL"] = safetyMinTTL.String()
	env["LEASESVC_LOG_LEVEL"] = "warn"
	runSafety(t, safetyConfig{
		backend: "firestore", upstream: emulators.Firestore(t), hostEnv: emulators.FirestoreHostEnv,
		env: env, topic: topic, instances: 3, contenders: 64, leases: 4, sessions: 8,
		ttl: 2 * safetyMinTTL, pollMin: 100 * time.Millisecond, pollMax: 300 * time.Millisecond,
		duration: safetyDuration(t),
	}, client)
}

func TestSafetySpanner(t *testing.T) {
	db, _ := spannerSetup(t)
	topic, client := eventsTopic(t)
	env := spannerServiceEnv(db,
		"LEASESVC_PROJECT", emulators.Project(),
		"LEASESVC_PUBSUB_TOPIC", topic,
		emulators.PubSubHostEnv, emulators.PubSub(t),
		"LEASESVC_MIN_TTL", safetyMinTTL.String(),
		"LEASESVC_LOG_LEVEL", "warn")
	runSafety(t, safetyConfig{
		backend: "spanner", upstream: emulators.Spanner(t), hostEnv: emulators.SpannerHostEnv,
		env: env, topic: topic, instances: 3, contenders: 64, leases: 4, sessions: 8,
		ttl: 2 * safetyMinTTL, pollMin: 200 * time.Millisecond, pollMax: 600 * time.Millisecond,
		duration: safetyDuration(t),
	}, client)
}

// TestSafetyPostgres runs on a throwaway PostgreSQL without Pub/Sub: waiters
// on other instances are woken through LISTEN/NOTIFY. The Pub/Sub fault is
// replaced by a restart of PostgreSQL itself (immediate shutdown, as a
// crash).
func TestSafetyPostgres(t *testing.T) {
	c := pgtest.Start(t)
	migrate := e2e.StartService(t, postgresServiceEnv(c, "LEASESVC_POSTGRES_MIGRATE", "true"))
	stopCleanly(t, migrate)
	var pgFaults []fault
	for _, f := range faults {
		if strings.HasPrefix(f.name, "Pub/Sub") {
			f = fault{"PostgreSQL restarted (immediate shutdown)", 5 * time.Second, func(*testing.T, *safetyRun, *safetyInstance, *pubsub.Client) {
				c.Restart()
			}}
		}
		pgFaults = append(pgFaults, f)
	}
	runSafety(t, safetyConfig{
		backend: "postgres", upstream: fmt.Sprintf("127.0.0.1:%d", c.Port), hostEnv: "LEASESVC_POSTGRES_URL",
		upstreamValue: func(addr string) string { return "postgres://postgres@" + addr + "/postgres?sslmode=disable" },
		env:           map[string]string{"LEASESVC_BACKEND": "postgres", "LEASESVC_MIN_TTL": safetyMinTTL.String(), "LEASESVC_LOG_LEVEL": "warn"},
		instances:     3, contenders: 64, leases: 4, sessions: 8, faults: pgFaults,
		ttl: 2 * safetyMinTTL, pollMin: 100 * time.Millisecond, pollMax: 300 * time.Millisecond,
		duration: safetyDuration(t),
	}, nil)
}
