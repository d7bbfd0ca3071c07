// Package conformance runs the same cases against the real leasesvc binary
// for the three SDKs — Go (package client), Python (sdk/python) and
// TypeScript (sdk/typescript) — through one agent program per language
// that prints one JSON line per step (docs/contract.md §12): acquire, renew,
// release, lost, held, waiting, a 429 with Retry-After, the service frozen
// with SIGSTOP (leading must end before TTL × (1 − drift margin) has passed
// since the last successful renew was sent, 20 runs per language), a
// revocation (leading ends at the next renew) and fencing proofs (a proof
// the service made verifies in every SDK; tampered, re-signed,
// unknown-key, other-lease, stale, bare-number and missing proofs are
// refused with the same reason in each). The tests of this package
// also run the Python SDK's own unittest suite.
//
// What an agent is given and must print, case by case, is PROTOCOL.md
// beside this file: a new SDK joins the suite by implementing it. The
// package has no code of its own beyond its tests; the Go agent is
// ./goagent.
package conformance
