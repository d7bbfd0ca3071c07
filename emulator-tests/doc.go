// Package emulatortests runs leasesvc against the Google Cloud emulators
// and a throwaway PostgreSQL: the backend conformance suite over the
// Firestore and Spanner emulators, the HTTP flows of the real service
// binary over each backend, restarts, the safety runs under faults, and
// benchmarks. (PostgreSQL's conformance suite runs in backend/postgres;
// its clusters come from backend/postgres/pgtest.)
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
