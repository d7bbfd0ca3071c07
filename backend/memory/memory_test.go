package memory_test

import (
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/backendtest"
	"github.com/leasesvc/leasesvc/backend/memory"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		clock := memory.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		return backendtest.Harness{Store: memory.New(memory.WithClock(clock.Now)), Advance: clock.Advance}
	}, backendtest.Options{ContentionDuration: 10 * time.Second})
}

// TestConformanceRealClock runs the suite on the default monotonic clock, as
// the service runs it, sleeping where time must pass.
func TestConformanceRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps through real TTLs; run without -short")
	}
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		return backendtest.Harness{Store: memory.New()}
	}, backendtest.Options{})
}

// TestSuccessionNotShared: the stored checkpoint and candidates share no
// memory with the decide that wrote them or with the records read back, so
// a caller that changes those slices in place changes nothing stored.
func TestSuccessionNotShared(t *testing.T) {
	s := memory.New()
	next := &backend.Record{Name: "n", Holder: "h", FencingToken: 1, TTL: time.Second,
		Checkpoint: []byte(`{"a":1}`), Candidates: []backend.Candidate{{ID: "w", Holder: "x", Priority: 3}}}
	written, err := s.Try(t.Context(), "n", func(backend.Snapshot) (*backend.Record, error) { return next, nil })
	if err != nil {
		t.Fatal(err)
	}
	next.Checkpoint[2], next.Candidates[0].Priority = 'b', 4
	written.Record.Checkpoint[2], written.Record.Candidates[0].Holder = 'c', "y"
	got, _ := s.Get(t.Context(), "n")
	got.Record.Checkpoint[2], got.Record.Candidates[0].ID = 'd', "z"
	list, _, _ := s.List(t.Context(), "", "", 10)
	list[0].Candidates[0].Preempt = true
	scan, _ := s.ScanExpiry(t.Context(), backend.Cursor{}, time.Now().Add(time.Hour), 10)
	scan[0].Candidates[0].Principal = "p"
	got, _ = s.Get(t.Context(), "n")
	if c := got.Record.Candidates[0]; string(got.Record.Checkpoint) != `{"a":1}` || c != (backend.Candidate{ID: "w", Holder: "x", Priority: 3}) {
		t.Fatalf("stored succession state changed by its readers and writer: %s %+v", got.Record.Checkpoint, got.Record.Candidates)
	}
}
