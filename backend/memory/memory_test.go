package memory_test

import (
	"testing"
	"time"

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
