package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/session"
)

// TestParseSessions: defaults, good values, and each bad value refused
// naming its variable.
func TestParseSessions(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	c, err := parseSessions(env(nil))
	if err != nil || c.LeaseTTL != 30*time.Second || c.MaxSessions != 900 || c.MaxPerCaller != 100 || c.MaxLeases != 1000 ||
		c.MessageRate != 200 || c.MaxMessage != 1<<20 || c.MaxAge != 55*time.Minute {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	c, err = parseSessions(env(map[string]string{"LEASESVC_SESSION_LEASE_TTL": "10s", "LEASESVC_MAX_SESSIONS": "5", "LEASESVC_MAX_SESSIONS_PER_CALLER": "2",
		"LEASESVC_MAX_SESSION_LEASES": "3", "LEASESVC_SESSION_MESSAGE_RATE": "50", "LEASESVC_SESSION_MAX_MESSAGE": "8192", "LEASESVC_SESSION_MAX_AGE": "10m"}))
	want := session.Config{LeaseTTL: 10 * time.Second, MaxSessions: 5, MaxPerCaller: 2, MaxLeases: 3, MessageRate: 50, MaxMessage: 8192, MaxAge: 10 * time.Minute}
	if err != nil || c != want {
		t.Fatalf("set: %+v, %v; want %+v", c, err, want)
	}
	for k, v := range map[string]string{
		"LEASESVC_SESSION_LEASE_TTL":       "500ms",
		"LEASESVC_SESSION_MAX_AGE":         "30s",
		"LEASESVC_MAX_SESSIONS":            "0",
		"LEASESVC_MAX_SESSIONS_PER_CALLER": "x",
		"LEASESVC_MAX_SESSION_LEASES":      "-1",
		"LEASESVC_SESSION_MESSAGE_RATE":    "1.5",
		"LEASESVC_SESSION_MAX_MESSAGE":     "100",
	} {
		if _, err := parseSessions(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: %v, want an error naming it", k, v, err)
		}
	}
}
