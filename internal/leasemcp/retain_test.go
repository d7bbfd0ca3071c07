package leasemcp

import (
	"testing"

	"github.com/leasesvc/leasesvc/sweeper"
)

// TestDoneMarkersOutliveRetention: the service's retention
// (LEASESVC_RETAIN_FREE) keeps the names ending in sweeper.KeepSuffix, so
// the done markers must end in it: a deleted marker would let a finished
// task be claimed again (docs/contract.md §15).
func TestDoneMarkersOutliveRetention(t *testing.T) {
	if doneSuffix != sweeper.KeepSuffix {
		t.Fatalf("done markers end in %q, retention keeps names ending in %q", doneSuffix, sweeper.KeepSuffix)
	}
}
