package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseSessionSocketLimits: LEASESVC_SESSION_OUT_BUFFER and
// LEASESVC_HEADER_TIMEOUT reach the session Config (0, the Registry's
// default, when unset), and bad values are refused naming the variable.
func TestParseSessionSocketLimits(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := parseSessions(env(nil))
	if err != nil || c.OutBuffer != 0 || c.OpenTimeout != 0 {
		t.Fatalf("unset: %+v, %v; want 0 (the Registry's defaults)", c, err)
	}
	c, err = parseSessions(env(map[string]string{"LEASESVC_SESSION_OUT_BUFFER": "65536", "LEASESVC_HEADER_TIMEOUT": "3s"}))
	if err != nil || c.OutBuffer != 65536 || c.OpenTimeout != 3*time.Second {
		t.Fatalf("set: %+v, %v", c, err)
	}
	for k, v := range map[string]string{
		"LEASESVC_SESSION_OUT_BUFFER": "4095",
		"LEASESVC_HEADER_TIMEOUT":     "0s",
	} {
		if _, err := parseSessions(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v, want an error naming it", k, v, err)
		}
	}
	if _, err := parseSessions(env(map[string]string{"LEASESVC_SESSION_OUT_BUFFER": "x"})); err == nil {
		t.Error("a non-number out buffer was taken")
	}
}
