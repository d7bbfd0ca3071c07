package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// instanceIDRE matches an instance ID: it becomes part of a Pub/Sub
// subscription ID and is the sweeper's holder name.
var instanceIDRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,59}$`)

// config is the service's start-up configuration.
type config struct {
	port      int           // listen port, 0–65535
	backend   string        // a registered backend (backend.Names)
	minTTL    time.Duration // shortest TTL a holder may ask for
	maxTTL    time.Duration // longest TTL a holder may ask for
	logLevel  slog.Level    // minimum level logged
	drain     time.Duration // how long shutdown waits for in-flight requests
	telemetry string        // none | stdout | otlp
}

// parseConfig reads the environment, then the flags, which override it.
// Every error names the variable or flag at fault.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{port: 8080, backend: "memory", minTTL: lease.DefaultMinTTL, maxTTL: lease.DefaultMaxTTL, drain: 5 * time.Second}
	var err error
	envInt := func(key string, dst *int) {
		if v := getenv(key); v != "" && err == nil {
			n, e := strconv.Atoi(v)
			if e != nil {
				err = fmt.Errorf("%s=%q: not an integer", key, v)
			}
			*dst = n
		}
	}
	envDur := func(key string, dst *time.Duration) {
		if v := getenv(key); v != "" && err == nil {
			d, e := time.ParseDuration(v)
			if e != nil {
				err = fmt.Errorf("%s=%q: not a duration such as 1s or 500ms", key, v)
			}
			*dst = d
		}
	}
	envInt("PORT", &c.port)
	if v := getenv("LEASESVC_BACKEND"); v != "" {
		c.backend = v
	}
	envDur("LEASESVC_MIN_TTL", &c.minTTL)
	envDur("LEASESVC_MAX_TTL", &c.maxTTL)
	envDur("LEASESVC_DRAIN_TIMEOUT", &c.drain)
	level := getenv("LEASESVC_LOG_LEVEL")
	c.telemetry = getenv("LEASESVC_TELEMETRY")
	if c.telemetry == "" {
		c.telemetry = "none"
	}
	if err != nil {
		return c, err
	}

	fs := flag.NewFlagSet("leasesvc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // -h prints every setting (writeHelp), not only the flags
	fs.IntVar(&c.port, "port", c.port, "listen port (env PORT)")
	fs.StringVar(&c.backend, "backend", c.backend, strings.Join(backend.Names(), " | ")+" (env LEASESVC_BACKEND)")
	fs.DurationVar(&c.minTTL, "min-ttl", c.minTTL, "shortest TTL a holder may ask for (env LEASESVC_MIN_TTL)")
	fs.DurationVar(&c.maxTTL, "max-ttl", c.maxTTL, "longest TTL a holder may ask for (env LEASESVC_MAX_TTL)")
	fs.StringVar(&level, "log-level", level, "debug | info | warn | error (env LEASESVC_LOG_LEVEL)")
	fs.StringVar(&c.telemetry, "telemetry", c.telemetry, "none | stdout | otlp (env LEASESVC_TELEMETRY)")
	fs.DurationVar(&c.drain, "drain", c.drain, "how long shutdown waits for in-flight requests (env LEASESVC_DRAIN_TIMEOUT)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	switch {
	case c.port < 0 || c.port > 65535:
		return c, fmt.Errorf("PORT/-port %d: must be 0–65535", c.port)
	case !slices.Contains(backend.Names(), c.backend):
		return c, fmt.Errorf("LEASESVC_BACKEND/-backend %q: must be one of %s", c.backend, strings.Join(backend.Names(), ", "))
	case c.minTTL < time.Millisecond || c.minTTL%time.Millisecond != 0:
		return c, fmt.Errorf("LEASESVC_MIN_TTL/-min-ttl %v: must be a whole number of milliseconds ≥ 1ms", c.minTTL)
	case c.maxTTL < c.minTTL || c.maxTTL%time.Millisecond != 0:
		return c, fmt.Errorf("LEASESVC_MAX_TTL/-max-ttl %v: must be a whole number of milliseconds ≥ the minimum TTL %v", c.maxTTL, c.minTTL)
	case c.telemetry != "none" && c.telemetry != "stdout" && c.telemetry != "otlp":
		return c, fmt.Errorf("LEASESVC_TELEMETRY/-telemetry %q: must be none, stdout or otlp", c.telemetry)
	case c.drain <= 0:
		return c, fmt.Errorf("LEASESVC_DRAIN_TIMEOUT/-drain %v: must be positive", c.drain)
	}
	if id := getenv("LEASESVC_INSTANCE_ID"); id != "" && !instanceIDRE.MatchString(id) {
		return c, fmt.Errorf("LEASESVC_INSTANCE_ID=%q: must be 1–60 characters of [a-z0-9-] starting with a letter", id)
	}
	if level != "" {
		if err := c.logLevel.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
			return c, fmt.Errorf("LEASESVC_LOG_LEVEL/-log-level %q: must be debug, info, warn or error", level)
		}
	}
	return c, nil
}
