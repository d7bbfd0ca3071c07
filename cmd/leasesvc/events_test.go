package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRecentEventsSetting: LEASESVC_RECENT_EVENTS must be an integer in
// 0 … 1,000,000; anything else stops start-up naming it.
func TestRecentEventsSetting(t *testing.T) {
	for _, v := range []string{"many", "-1", "1000001", "1e3"} {
		var stdout, stderr bytes.Buffer
		getenv := func(k string) string {
			if k == "LEASESVC_RECENT_EVENTS" {
				return v
			}
			return ""
		}
		err := run(t.Context(), nil, getenv, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "LEASESVC_RECENT_EVENTS") {
			t.Errorf("LEASESVC_RECENT_EVENTS=%s: run = %v, want an error naming it", v, err)
		}
	}
	for _, v := range []string{"0", "10", ""} {
		e, err := newEvents(t.Context(), func(k string) string {
			if k == "LEASESVC_RECENT_EVENTS" {
				return v
			}
			return ""
		}, nil, "i", nil)
		if err != nil || e.hub == nil {
			t.Errorf("LEASESVC_RECENT_EVENTS=%q: %v", v, err)
		}
	}
}
