// Package emulatortests runs leasesvc against the Google Cloud emulators:
// the backend conformance suite over the Firestore and Spanner emulators,
// the HTTP flows of the real service binary over each backend, restarts,
// and benchmarks.
//
// The emulators are started once per test process by package emulators
// (TestMain calls emulators.Main, which stops them when the tests end).
// Without gcloud and the emulator components the tests skip, saying what to
// install; under CI=true they fail instead.
//
//	go test ./emulator-tests/...
//	CI=true go test ./emulator-tests/...
//	go test -run '^$' -bench Firestore -benchtime 400x ./emulator-tests/
package emulatortests
