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

// TestRowsNotShared: the stored metadata and value share no memory with
// the decide that wrote them or with the rows read back, so a caller that
// changes those slices in place changes nothing stored.
func TestRowsNotShared(t *testing.T) {
	s := memory.New()
	next := &backend.Row{Name: "n", Holder: "h", FencingToken: 1, TTL: time.Second,
		Metadata: []byte(`{"m":1}`), Value: []byte(`{"a":1}`)}
	written, err := s.Try(t.Context(), "n", func(backend.Snapshot) (*backend.Row, error) { return next, nil })
	if err != nil {
		t.Fatal(err)
	}
	next.Value[2], next.Metadata[2] = 'b', 'b'
	written.Row.Value[2], written.Row.Metadata[2] = 'c', 'c'
	got, _ := s.Get(t.Context(), "n")
	got.Row.Value[2], got.Row.Metadata[2] = 'd', 'd'
	list, _, _ := s.List(t.Context(), "", "", 10)
	list[0].Value[2], list[0].Metadata[2] = 'e', 'e'
	scan, _ := s.ScanExpiry(t.Context(), backend.Cursor{}, time.Now().Add(time.Hour), 10)
	scan[0].Value[2], scan[0].Metadata[2] = 'f', 'f'
	got, _ = s.Get(t.Context(), "n")
	if string(got.Row.Value) != `{"a":1}` || string(got.Row.Metadata) != `{"m":1}` {
		t.Fatalf("stored row changed by its readers and writer: %s %s", got.Row.Metadata, got.Row.Value)
	}
}
