// Package emulators starts the Google Cloud emulators (Firestore, Spanner,
// Pub/Sub) that the emulator tests run against, once per test process.
//
// Each emulator runs in a process group of its own, under a small bash
// supervisor that reads its standard input from a pipe held by the test
// process. When the test process ends for any reason (normal exit, panic,
// -timeout, SIGKILL) the kernel closes that pipe, the supervisor sees EOF and
// kills its whole group, so no emulator outlives the tests. Main stops every
// emulator it started as soon as the tests return; StopPubSub and
// RestartPubSub stop and restart one emulator for outage tests.
//
// When an emulator cannot be had (gcloud or the emulator component is not
// installed), a test that asks for it is skipped with a message saying what to
// install, except under CI=true, where it fails: a CI run without emulators
// must not report green. An emulator that is installed but fails to start
// always fails the test, with the tail of its log.
//
// The emulators are per-process state by nature, so this package keeps them
// in a package-level registry guarded by a mutex.
package emulators

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Environment variables through which the client libraries find the
// emulators; an emulator whose variable is already set when it is first
// asked for is used as it is instead of being started.
const (
	FirestoreHostEnv = "FIRESTORE_EMULATOR_HOST"
	SpannerHostEnv   = "SPANNER_EMULATOR_HOST"
	PubSubHostEnv    = "PUBSUB_EMULATOR_HOST"
)

// project is the Google Cloud project id every emulator test uses.
const project = "leasesvc-test"

// Project returns the fixed project id that emulator tests use.
func Project() string { return project }

// Firestore returns the host:port of a Firestore emulator, starting one on
// first use (once per test process). FIRESTORE_EMULATOR_HOST, if already set,
// is used instead of starting one. It sets FIRESTORE_EMULATOR_HOST for the
// process. When the emulator cannot be had it skips the test with a message
// saying what to install, or fails it under CI=true.
func Firestore(t testing.TB) string {
	t.Helper()
	return reg.get(t, firestoreKind)
}

// Spanner returns the host:port (gRPC) of a Spanner emulator, starting one on
// first use, like Firestore. It sets SPANNER_EMULATOR_HOST for the process.
// It creates no instance or database: the Spanner tests do that.
func Spanner(t testing.TB) string {
	t.Helper()
	return reg.get(t, spannerKind)
}

// PubSub returns the host:port of a Pub/Sub emulator, starting one on first
// use, like Firestore. It sets PUBSUB_EMULATOR_HOST for the process.
func PubSub(t testing.TB) string {
	t.Helper()
	return reg.get(t, pubsubKind)
}

// StopPubSub stops the Pub/Sub emulator that PubSub started and waits until
// its port is closed and no process of its group is left;
// PUBSUB_EMULATOR_HOST keeps pointing at the dead port, as an outage looks
// to a client. It fails the test if PubSub has not started one; with an
// emulator given through PUBSUB_EMULATOR_HOST it skips (fails under CI=true),
// since it cannot stop what it did not start.
func StopPubSub(t testing.TB) {
	t.Helper()
	reg.stop(t, pubsubKind)
}

// RestartPubSub starts the Pub/Sub emulator again on the port it had, after
// StopPubSub, and returns its host:port. A restarted emulator has lost every
// topic and subscription. It is a no-op returning the address if the
// emulator is running.
func RestartPubSub(t testing.TB) string {
	t.Helper()
	return reg.restart(t, pubsubKind)
}

// Main runs the tests and then stops every emulator it started; use it as
//
//	func TestMain(m *testing.M) { os.Exit(emulators.Main(m)) }
//
// Logs of the emulators are removed when the tests pass and kept (their
// paths printed to stderr) when they fail.
func Main(m *testing.M) int {
	code := m.Run()
	reg.stopAll(code == 0)
	return code
}

// onCI reports whether the tests run under CI=true, where a missing emulator
// is a failure rather than a skip.
func onCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// unavailable ends the test for an emulator that cannot be had: t.Fatal
// under CI=true, t.Skip elsewhere.
func unavailable(t testing.TB, msg string) {
	t.Helper()
	if onCI() {
		t.Fatalf("%s (CI=true: emulator tests must run, not skip)", msg)
	}
	t.Skipf("%s (skipping; under CI=true this fails)", msg)
}

// fileExists reports whether path names an existing file or directory.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// sdkPath joins elements under the Cloud SDK root.
func sdkPath(root string, elem ...string) string {
	return filepath.Join(append([]string{root}, elem...)...)
}
