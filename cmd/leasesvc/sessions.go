package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/leasesvc/leasesvc/session"
)

// parseSessions reads the session settings (docs/contract.md §14); every
// error names its variable. OpenTimeout and OutBuffer stay 0 (the
// Registry's defaults) unless set.
func parseSessions(getenv func(string) string) (session.Config, error) {
	c := session.Config{LeaseTTL: session.DefaultLeaseTTL, MaxSessions: session.DefaultMaxSessions, MaxPerCaller: session.DefaultMaxPerCaller,
		MaxLeases: session.DefaultMaxLeases, MessageRate: session.DefaultMessageRate, MaxMessage: session.DefaultMaxMessage, MaxAge: session.DefaultMaxAge}
	// Each name is read by a literal getenv call, so that the terraform
	// module's test sees what the service reads.
	durs := []struct {
		key, v string
		dst    *time.Duration
		min    time.Duration
	}{
		{"LEASESVC_SESSION_LEASE_TTL", getenv("LEASESVC_SESSION_LEASE_TTL"), &c.LeaseTTL, time.Second},
		{"LEASESVC_SESSION_MAX_AGE", getenv("LEASESVC_SESSION_MAX_AGE"), &c.MaxAge, time.Minute},
	}
	for _, d := range durs {
		if v := d.v; v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x < d.min || x%time.Millisecond != 0 {
				return c, fmt.Errorf("%s=%q: want a duration of at least %v in whole milliseconds, such as 30s or 55m", d.key, v, d.min)
			}
			*d.dst = x
		}
	}
	ints := []struct {
		key, v   string
		dst      *int
		min, max int
	}{
		{"LEASESVC_MAX_SESSIONS", getenv("LEASESVC_MAX_SESSIONS"), &c.MaxSessions, 1, 1 << 20},
		{"LEASESVC_MAX_SESSIONS_PER_CALLER", getenv("LEASESVC_MAX_SESSIONS_PER_CALLER"), &c.MaxPerCaller, 1, 1 << 20},
		{"LEASESVC_MAX_SESSION_LEASES", getenv("LEASESVC_MAX_SESSION_LEASES"), &c.MaxLeases, 1, 1 << 20},
		{"LEASESVC_SESSION_MESSAGE_RATE", getenv("LEASESVC_SESSION_MESSAGE_RATE"), &c.MessageRate, 1, 1 << 20},
	}
	for _, n := range ints {
		if v := n.v; v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < n.min || x > n.max {
				return c, fmt.Errorf("%s=%q: want an integer from %d to %d", n.key, v, n.min, n.max)
			}
			*n.dst = x
		}
	}
	if v := getenv("LEASESVC_SESSION_OUT_BUFFER"); v != "" {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 4<<10 || x > 64<<20 {
			return c, fmt.Errorf("LEASESVC_SESSION_OUT_BUFFER=%q: want a number of bytes from 4096 to 67108864", v)
		}
		c.OutBuffer = x
	}
	// An upgraded socket must send open or resume within the header
	// timeout (parseLimits reads the same variable for the server).
	if v := getenv("LEASESVC_HEADER_TIMEOUT"); v != "" {
		x, err := time.ParseDuration(v)
		if err != nil || x <= 0 {
			return c, fmt.Errorf("LEASESVC_HEADER_TIMEOUT=%q: want a positive duration such as 10s or 2m", v)
		}
		c.OpenTimeout = x
	}
	if v := getenv("LEASESVC_SESSION_MAX_MESSAGE"); v != "" {
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil || x < 4<<10 || x > 64<<20 {
			return c, fmt.Errorf("LEASESVC_SESSION_MAX_MESSAGE=%q: want a number of bytes from 4096 to 67108864", v)
		}
		c.MaxMessage = x
	}
	return c, nil
}

// sessionLogAttrs are the session settings as the start-up line shows them.
func sessionLogAttrs(c session.Config) slog.Attr {
	return slog.Group("sessions", "leaseTTL", c.LeaseTTL.String(), "max", c.MaxSessions, "perCaller", c.MaxPerCaller,
		"leases", c.MaxLeases, "messageRate", c.MessageRate, "maxMessage", c.MaxMessage, "maxAge", c.MaxAge.String(),
		"outBuffer", cmp.Or(c.OutBuffer, session.DefaultOutBuffer), "openTimeout", cmp.Or(c.OpenTimeout, session.DefaultOpenTimeout).String())
}
