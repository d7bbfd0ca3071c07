// Package backendtest is the conformance suite that every backend.Store
// runs: the driver contract (compare-and-set, missing keys, cancelled
// contexts, order of List) and, through lease.Managers over the store (one
// per service instance), every rule of docs/contract.md §3, the
// succession of §8 and the session-held holdings of §14, and, for a
// backend.Remover, the compare-and-delete that removes a row for good.
//
// A driver stores rows and never sees a lease.Record: the store tests
// write the rows that package lease's codec makes of records with every
// field set (records.go, lease.UpdateWith) and check that what the driver
// gives back decodes to what was written.
//
// The memory backend runs it in go test ./...; the Firestore and Spanner
// backends run the same suite on the real emulators. Every test uses lease
// names of its own, so one store may serve all tests and tests run in
// parallel.
package backendtest

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// Harness is the backend under test, as one test sees it.
type Harness struct {
	// Store is the backend under test.
	Store backend.Store
	// Advance moves the store's clock forward by d. Nil means the store
	// follows real time, and the suite sleeps instead.
	Advance func(d time.Duration)
}

// Options tune the suite for a backend.
type Options struct {
	// ContentionDuration is how long the contention test runs its 64
	// contenders. Default 2s.
	ContentionDuration time.Duration
	// Contenders is how many goroutines the contention test runs. Default 64.
	Contenders int
	// SuccessionRounds is how many releases the priority test hands to the
	// best of three candidates. Default 100.
	SuccessionRounds int
}

// Run runs the conformance suite. newHarness is called once per test and
// may return the same store every time.
func Run(t *testing.T, newHarness func(t *testing.T) Harness, opts Options) {
	if opts.ContentionDuration == 0 {
		opts.ContentionDuration = 2 * time.Second
	}
	if opts.Contenders == 0 {
		opts.Contenders = 64
	}
	if opts.SuccessionRounds == 0 {
		opts.SuccessionRounds = 100
	}
	s := &suite{newHarness: newHarness, opts: opts}
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"Store/GetMissing", testGetMissing},
		{"Store/UpdateRoundTrip", testUpdateRoundTrip},
		{"Store/SuccessionRoundTrip", testSuccessionRoundTrip},
		{"Store/DecideNilWritesNothing", testDecideNil},
		{"Store/DecideErrorWritesNothing", testDecideError},
		{"Store/NoLostUpdates", testNoLostUpdates},
		{"Store/TryIsOneAttempt", testTryOneAttempt},
		{"Store/ServerTimeAdvances", testServerTimeAdvances},
		{"Store/ListOrderPrefixAfter", testStoreList},
		{"Store/CancelledContext", testCancelledContext},
		{"Store/ScanExpiry", testScanExpiry},
		{"Store/BatchedUpdates", testBatchedUpdates},
		{"Store/TryBatch", testTryBatch},
		{"Acquire/New", testAcquireNew},
		{"Acquire/FiftyRacersOneWinner", testAcquireRace},
		{"Acquire/HeldByAnother", testAcquireHeld},
		{"Acquire/IdempotentForHolder", testAcquireIdempotent},
		{"Acquire/InvalidChangesNothing", testAcquireInvalid},
		{"Token/SequenceAcrossReleaseExpiryReacquire", testTokenSequence},
		{"Renew/Extends", testRenew},
		{"Renew/Lost", testRenewLost},
		{"Release/EndsAndIsIdempotent", testRelease},
		{"Release/Lost", testReleaseLost},
		{"Get/NotFound", testGetNotFound},
		{"List/Paging", testListPaging},
		{"Events/OnePerChangeOfHolding", testEvents},
		{"Principal/BindsTheHolding", testPrincipalBinding},
		{"Revoke/EndsTheHolding", testRevoke},
		{"Delete/KeepsTheToken", testDeleteKeepsTheToken},
		{"Delete/Refusals", testDeleteRefusals},
		{"Contention/NoOverlap", s.testContention},
		{"Succession/PriorityWins", s.testSuccessionPriority},
		{"Succession/EarliestWaiterBreaksTies", testSuccessionTieBreak},
		{"Succession/GoneCandidateForgotten", testSuccessionGoneCandidate},
		{"Succession/ReaskKeepsPlace", testSuccessionReaskKeepsPlace},
		{"Succession/DeadCandidateReservesAtMost5s", testSuccessionDeadCandidate},
		{"Succession/PreemptAndCheckpoint", testSuccessionPreempt},
		{"Succession/CheckpointOutlivesACrash", testSuccessionCheckpoint},
		{"Succession/Transfer", testSuccessionTransfer},
		{"Succession/NoPriorityNoChange", testSuccessionNoPriority},
		{"Session/Lifecycle", testSessionLifecycle},
		{"Remove/DeletesForGood", testRemoveDeletes},
		{"Remove/RefusedKeepsTheRow", testRemoveRefused},
		{"Remove/MissingRow", testRemoveMissing},
		{"Remove/SeesTheCurrentRowAndTime", testRemoveSees},
		{"Remove/RaceWithTry", testRemoveRace},
	}
	// TryBatch and Remove are capabilities: a store that does not offer
	// one (backend.BatchStore, backend.Remover) has no such test, rather
	// than a skipped one.
	store := s.newHarness(t).Store
	_, batches := store.(backend.BatchStore)
	_, removes := store.(backend.Remover)
	for _, tc := range tests {
		if tc.name == "Store/TryBatch" && !batches || strings.HasPrefix(tc.name, "Remove/") && !removes {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, s.env(t))
		})
	}
}

type suite struct {
	newHarness func(t *testing.T) Harness
	opts       Options
}

// env is what one test works with.
type env struct {
	Harness
	prefix string // unique to the test; every name it uses starts with it
	loop   *backend.Loop
	recs   records // the lease records that loop and Store hold
}

func (s *suite) env(t *testing.T) *env {
	h := s.newHarness(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	loop := backend.NewLoop(h.Store)
	return &env{Harness: h, prefix: "bt" + hex.EncodeToString(b[:]) + ".", loop: loop, recs: records{store: h.Store, loop: loop}}
}

// name returns a lease name unique to the test.
func (e *env) name(s string) string { return e.prefix + s }

// manager returns a Manager over the store with default bounds.
func (e *env) manager(t *testing.T, onChange func(lease.Event)) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(e.Store, lease.Config{OnChange: onChange})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m
}

// pass lets d of backend time go by.
func (e *env) pass(d time.Duration) {
	if e.Advance != nil {
		e.Advance(d)
		return
	}
	time.Sleep(d)
}

// expire lets a holding of ttl run out, with a margin for real clocks.
func (e *env) expire(ttl time.Duration) {
	if e.Advance != nil {
		e.Advance(ttl)
		return
	}
	time.Sleep(ttl + 100*time.Millisecond)
}
