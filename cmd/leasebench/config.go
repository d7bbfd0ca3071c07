package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// allScenarios lists the scenarios in the order they run.
var allScenarios = []string{"latency", "contention", "handoff", "takeover", "succession", "events",
	"sessiontakeover", "sessionwrites", "sessionfailover", "sessionscale", "proofs", "throughput"}

// defaultScenarios are those that run without -scenarios: the session
// scenarios run only when named (they start agent processes and, with
// -leasesvc, instances of their own, and take minutes).
var defaultScenarios = []string{"latency", "contention", "handoff", "takeover", "succession", "events", "throughput"}

// config is leasebench's configuration: flags, and the backend settings
// from the environment for the direct comparison.
type config struct {
	urls        []string        // service base URLs, at least one
	backend     string          // memory | firestore | spanner | postgres: what the service runs on
	scenarios   []string        // which scenarios, in allScenarios order
	n           int             // latency and contention samples per series
	samples     int             // handoff, takeover and event samples
	agents      []int           // throughput: agent counts, one run each
	ttl         time.Duration   // throughput: the agents' TTL; they renew every ttl/3
	duration    time.Duration   // throughput: how long the agents renew
	concurrency int             // throughput: acquires and releases in flight at set-up and clean-up
	agentURLs   int             // throughput: the agents use the first agentURLs of urls (0: all)
	contenders  int             // contention: goroutines hammering acquire
	pauses      []time.Duration // contention: a contender's pause between attempts, one run each
	renewEvery  time.Duration   // contention: the holder's pause between renewals
	takeoverTTL time.Duration   // takeover: the crashed holder's TTL (≥ the service's minimum)
	// succession: the holder's TTL and its pause between renewals.
	successionTTL, successionRenew time.Duration
	topic                          string        // events: a Pub/Sub topic to subscribe to; "" uses a watch stream
	timeout                        time.Duration // one request's limit
	json                           bool          // JSON output instead of a table
	prefix                         string        // lease name prefix, unique per run by default

	// The session scenarios.
	sessionWindows   []time.Duration // sessiontakeover: the session windows, one arm each
	compareTTLs      []time.Duration // sessiontakeover: plain-renewal TTLs, one arm each
	slowSamples      int             // sessiontakeover: samples of an arm of TTL ≥ 10s
	leasesvc         string          // sessionfailover, sessionscale: the leasesvc binary they start
	writeSessions    int             // sessionwrites: sessions
	writeLeases      int             // sessionwrites: leases per session
	writeDuration    time.Duration   // sessionwrites: how long each arm holds
	writePlain       bool            // sessionwrites: run the plain-renewal arm too
	failoverRuns     int             // sessionfailover: runs
	failoverSessions int             // sessionfailover: sessions on the instance that goes
	failoverLeases   int             // sessionfailover: leases per session
	scaleSessions    []int           // sessionscale: session counts (-sessions)
	scaleRuns        []scaleRunSpec  // sessionscale: one run each
	scaleDuration    time.Duration   // sessionscale: how long the sessions heartbeat
	scaleWindow      time.Duration   // sessionscale: their window

	// From the environment, as leasesvc reads them, for the direct path.
	project           string // LEASESVC_PROJECT or GOOGLE_CLOUD_PROJECT
	firestoreDatabase string // LEASESVC_FIRESTORE_DATABASE, default (default)
	spannerDatabase   string // LEASESVC_SPANNER_DATABASE
	postgresURL       string // LEASESVC_POSTGRES_URL
	directCollection  string // -direct-collection: the Firestore collection of the direct path
}

// parseConfig reads flags (and, for what the direct path needs, the
// environment). Every error names the flag or variable at fault.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{backend: "memory", n: 200, samples: 30, ttl: 30 * time.Second, duration: 30 * time.Second,
		concurrency: 64, contenders: 64, renewEvery: 10 * time.Millisecond, takeoverTTL: time.Second, timeout: 30 * time.Second,
		successionTTL: 3 * time.Second, successionRenew: 100 * time.Millisecond,
		firestoreDatabase: "(default)", directCollection: "leasebench-direct"}
	if v := getenv("LEASESVC_BACKEND"); v != "" {
		c.backend = v
	}
	c.postgresURL = getenv("LEASESVC_POSTGRES_URL")
	c.project = getenv("LEASESVC_PROJECT")
	if c.project == "" {
		c.project = getenv("GOOGLE_CLOUD_PROJECT")
	}
	if v := getenv("LEASESVC_FIRESTORE_DATABASE"); v != "" {
		c.firestoreDatabase = v
	}
	c.spannerDatabase = getenv("LEASESVC_SPANNER_DATABASE")

	c.sessionWindows = []time.Duration{time.Second, 300 * time.Millisecond}
	c.compareTTLs = []time.Duration{time.Second, 30 * time.Second}
	c.slowSamples, c.writeSessions, c.writeLeases, c.writeDuration = 3, 10, 10, time.Minute
	c.failoverRuns, c.failoverSessions, c.failoverLeases = 20, 100, 10
	c.scaleDuration, c.scaleWindow = 5*time.Minute, time.Second
	var urls, scenarios, agents, pauses, windows, ttls, scale, runs string
	fs := flag.NewFlagSet("leasebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&urls, "url", "http://127.0.0.1:8080", "service base URLs, comma-separated; handoff, takeover and events use the first and the second")
	fs.StringVar(&c.backend, "backend", c.backend, "memory | firestore | spanner | postgres: the service's backend, for the direct comparison (env LEASESVC_BACKEND)")
	fs.StringVar(&scenarios, "scenarios", strings.Join(defaultScenarios, ","), "scenarios to run, comma-separated: "+strings.Join(allScenarios, ", "))
	fs.IntVar(&c.n, "n", c.n, "latency and contention: samples per series")
	fs.IntVar(&c.samples, "samples", c.samples, "handoff, takeover and events: samples")
	fs.StringVar(&agents, "agents", "1000", "throughput: agent counts, comma-separated (each holds one lease)")
	fs.DurationVar(&c.ttl, "ttl", c.ttl, "throughput: the agents' TTL; they renew every ttl/3")
	fs.DurationVar(&c.duration, "duration", c.duration, "throughput: how long the agents renew")
	fs.IntVar(&c.concurrency, "concurrency", c.concurrency, "throughput: requests in flight while acquiring and releasing the agents' leases")
	fs.IntVar(&c.agentURLs, "agent-instances", 0, "throughput: the agents use only the first n service URLs (0: all, in turn); 1 keeps the Spanner emulator to one client")
	fs.IntVar(&c.contenders, "contenders", c.contenders, "contention: goroutines hammering acquire on the held lease")
	fs.StringVar(&pauses, "contender-pauses", "0,50ms", "contention: a contender's mean pause between attempts (jittered ±50%), comma-separated, one run each (0: flat out)")
	fs.DurationVar(&c.renewEvery, "renew-every", c.renewEvery, "contention: the holder's pause between renewals")
	fs.DurationVar(&c.takeoverTTL, "takeover-ttl", c.takeoverTTL, "takeover: the crashed holder's TTL (at least the service's LEASESVC_MIN_TTL)")
	fs.DurationVar(&c.successionTTL, "succession-ttl", c.successionTTL, "succession: the holder's TTL")
	fs.DurationVar(&c.successionRenew, "succession-renew", c.successionRenew, "succession: the holder's pause between renewals (it sees a yield request at the next one)")
	fs.StringVar(&c.topic, "pubsub-topic", "", "events: the service's Pub/Sub topic (ID in LEASESVC_PROJECT, or projects/P/topics/T); unset uses a watch stream")
	fs.StringVar(&windows, "session-windows", "1s,300ms", "sessiontakeover: session windows, comma-separated, one arm each")
	fs.StringVar(&ttls, "session-compare-ttls", "1s,30s", "sessiontakeover: TTLs of the same takeover with plain renewals, comma-separated, one arm each")
	fs.IntVar(&c.slowSamples, "slow-samples", c.slowSamples, "sessiontakeover: samples of a plain-renewal arm whose TTL is 10s or more (the others take -samples)")
	fs.StringVar(&c.leasesvc, "leasesvc", "", "sessionfailover, sessionscale: the leasesvc binary they start instances of (with leasebench's environment: the same backend)")
	fs.IntVar(&c.writeSessions, "write-sessions", c.writeSessions, "sessionwrites: sessions")
	fs.IntVar(&c.writeLeases, "write-leases", c.writeLeases, "sessionwrites: leases per session (the plain arm holds as many in all)")
	fs.DurationVar(&c.writeDuration, "write-duration", c.writeDuration, "sessionwrites: how long each arm holds while its writes are counted")
	fs.BoolVar(&c.writePlain, "write-plain", true, "sessionwrites: also count the plain-renewal arm (TTL 1 s) of as many leases")
	fs.IntVar(&c.failoverRuns, "failover-runs", c.failoverRuns, "sessionfailover: runs (SIGKILL and SIGTERM in turn)")
	fs.IntVar(&c.failoverSessions, "failover-sessions", c.failoverSessions, "sessionfailover: sessions on the instance that goes")
	fs.IntVar(&c.failoverLeases, "failover-leases", c.failoverLeases, "sessionfailover: leases per session")
	fs.StringVar(&scale, "sessions", "1000", "sessionscale: session counts, comma-separated, one run each at -scale-window (one lease each); with -scale-window, replaces -scale-runs")
	fs.StringVar(&runs, "scale-runs", "1000@1s,900@200ms", "sessionscale: runs, comma-separated, each COUNT@WINDOW (sessions of one lease each at that window)")
	fs.DurationVar(&c.scaleDuration, "scale-duration", c.scaleDuration, "sessionscale: how long the sessions heartbeat")
	fs.DurationVar(&c.scaleWindow, "scale-window", c.scaleWindow, "sessionscale: the sessions' window for -sessions; with -sessions, replaces -scale-runs")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "one request's time limit")
	fs.BoolVar(&c.json, "json", false, "write JSON instead of a table")
	fs.StringVar(&c.prefix, "prefix", "", "lease name prefix (default leasebench.<random>)")
	fs.StringVar(&c.directCollection, "direct-collection", c.directCollection, "the Firestore collection the direct path writes")
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	for _, u := range splitList(urls) {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return c, fmt.Errorf("-url %q: want http://host:port", u)
		}
		c.urls = append(c.urls, strings.TrimSuffix(u, "/"))
	}
	if len(c.urls) == 0 {
		return c, errors.New("-url: at least one service URL is required")
	}
	for _, s := range splitList(scenarios) {
		if !slices.Contains(allScenarios, s) {
			return c, fmt.Errorf("-scenarios: unknown scenario %q (have %s)", s, strings.Join(allScenarios, ", "))
		}
	}
	for _, s := range allScenarios { // run in the documented order
		if slices.Contains(splitList(scenarios), s) {
			c.scenarios = append(c.scenarios, s)
		}
	}
	if len(c.scenarios) == 0 {
		return c, errors.New("-scenarios: none given")
	}
	for _, a := range splitList(agents) {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 || n > 100_000 {
			return c, fmt.Errorf("-agents %q: want counts between 1 and 100000", a)
		}
		c.agents = append(c.agents, n)
	}
	for _, p := range splitList(pauses) {
		d, err := time.ParseDuration(p)
		if p == "0" {
			d, err = 0, nil
		}
		if err != nil || d < 0 {
			return c, fmt.Errorf("-contender-pauses %q: want durations such as 0 or 50ms", p)
		}
		c.pauses = append(c.pauses, d)
	}
	var err error
	if c.sessionWindows, err = durationList(windows, "-session-windows", 200*time.Millisecond); err != nil {
		return c, err
	}
	if c.compareTTLs, err = durationList(ttls, "-session-compare-ttls", time.Millisecond); err != nil {
		return c, err
	}
	c.scaleSessions = nil
	for _, a := range splitList(scale) {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 || n > 100_000 {
			return c, fmt.Errorf("-sessions %q: want counts between 1 and 100000", a)
		}
		c.scaleSessions = append(c.scaleSessions, n)
	}
	if c.scaleRuns, err = scaleRunList(runs); err != nil {
		return c, err
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if explicit["sessions"] || explicit["scale-window"] {
		c.scaleRuns = nil
		for _, n := range c.scaleSessions {
			c.scaleRuns = append(c.scaleRuns, scaleRunSpec{sessions: n, window: c.scaleWindow})
		}
	}
	switch {
	case c.slowSamples < 1:
		return c, fmt.Errorf("-slow-samples %d: must be at least 1", c.slowSamples)
	case c.writeSessions < 1 || c.writeLeases < 1:
		return c, fmt.Errorf("-write-sessions %d, -write-leases %d: must be at least 1", c.writeSessions, c.writeLeases)
	case c.writeDuration <= 0 || c.scaleDuration <= 0:
		return c, fmt.Errorf("-write-duration %v, -scale-duration %v: must be positive", c.writeDuration, c.scaleDuration)
	case c.failoverRuns < 1 || c.failoverSessions < 1 || c.failoverLeases < 1:
		return c, fmt.Errorf("-failover-runs %d, -failover-sessions %d, -failover-leases %d: must be at least 1", c.failoverRuns, c.failoverSessions, c.failoverLeases)
	case c.scaleWindow < 200*time.Millisecond:
		return c, fmt.Errorf("-scale-window %v: must be at least 200ms", c.scaleWindow)
	case (slices.Contains(c.scenarios, "sessionfailover") || slices.Contains(c.scenarios, "sessionscale")) && c.leasesvc == "":
		return c, errors.New("-leasesvc: sessionfailover and sessionscale start instances of their own: give the leasesvc binary")
	}
	switch {
	case c.backend != "memory" && c.backend != "firestore" && c.backend != "spanner" && c.backend != "postgres":
		return c, fmt.Errorf("-backend/LEASESVC_BACKEND %q: must be memory, firestore, spanner or postgres", c.backend)
	case c.n < 1:
		return c, fmt.Errorf("-n %d: must be at least 1", c.n)
	case c.samples < 1:
		return c, fmt.Errorf("-samples %d: must be at least 1", c.samples)
	case c.ttl < time.Second || c.ttl%time.Millisecond != 0:
		return c, fmt.Errorf("-ttl %v: must be a whole number of milliseconds, at least 1s", c.ttl)
	case c.duration <= 0:
		return c, fmt.Errorf("-duration %v: must be positive", c.duration)
	case c.concurrency < 1:
		return c, fmt.Errorf("-concurrency %d: must be at least 1", c.concurrency)
	case c.agentURLs < 0 || c.agentURLs > len(c.urls):
		return c, fmt.Errorf("-agent-instances %d: must be within 0–%d (the service URLs given)", c.agentURLs, len(c.urls))
	case c.contenders < 1:
		return c, fmt.Errorf("-contenders %d: must be at least 1", c.contenders)
	case c.renewEvery < 0:
		return c, fmt.Errorf("-renew-every %v: must not be negative", c.renewEvery)
	case c.takeoverTTL < time.Millisecond || c.takeoverTTL%time.Millisecond != 0:
		return c, fmt.Errorf("-takeover-ttl %v: must be a whole number of milliseconds", c.takeoverTTL)
	case c.successionTTL < time.Millisecond || c.successionTTL%time.Millisecond != 0:
		return c, fmt.Errorf("-succession-ttl %v: must be a whole number of milliseconds", c.successionTTL)
	case c.successionRenew <= 0 || c.successionRenew >= c.successionTTL:
		return c, fmt.Errorf("-succession-renew %v: must be positive and below -succession-ttl %v", c.successionRenew, c.successionTTL)
	case c.timeout <= 0:
		return c, fmt.Errorf("-timeout %v: must be positive", c.timeout)
	case c.backend == "firestore" && c.project == "":
		return c, errors.New("-backend firestore: set LEASESVC_PROJECT (or GOOGLE_CLOUD_PROJECT) for the direct path")
	case c.backend == "spanner" && c.spannerDatabase == "":
		return c, errors.New("-backend spanner: set LEASESVC_SPANNER_DATABASE for the direct path")
	case c.backend == "postgres" && c.postgresURL == "":
		return c, errors.New("-backend postgres: set LEASESVC_POSTGRES_URL for the direct path")
	case c.topic != "" && c.project == "" && !strings.HasPrefix(c.topic, "projects/"):
		return c, errors.New("-pubsub-topic is a topic ID: set LEASESVC_PROJECT (or GOOGLE_CLOUD_PROJECT), or give projects/P/topics/T")
	}
	if c.prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.prefix = "leasebench." + hex.EncodeToString(b[:])
	}
	return c, nil
}

// durationList parses a comma-separated list of durations of whole
// milliseconds, each at least least.
func durationList(s, flag string, least time.Duration) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range splitList(s) {
		d, err := time.ParseDuration(p)
		if err != nil || d < least || d%time.Millisecond != 0 {
			return nil, fmt.Errorf("%s %q: want durations of whole milliseconds, at least %v", flag, p, least)
		}
		out = append(out, d)
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// scaleRunSpec is one run of sessionscale: that many sessions at window.
type scaleRunSpec struct {
	sessions int
	window   time.Duration
}

// String is the run as -scale-runs spells it.
func (r scaleRunSpec) String() string { return strconv.Itoa(r.sessions) + "@" + r.window.String() }

// scaleRunList parses -scale-runs: COUNT@WINDOW, comma-separated.
func scaleRunList(v string) ([]scaleRunSpec, error) {
	var runs []scaleRunSpec
	for _, a := range splitList(v) {
		count, window, ok := strings.Cut(a, "@")
		n, err := strconv.Atoi(count)
		w, werr := time.ParseDuration(window)
		if !ok || err != nil || werr != nil || n < 1 || n > 100_000 || w < 200*time.Millisecond {
			return nil, fmt.Errorf("-scale-runs %q: want COUNT@WINDOW, a count between 1 and 100000 and a window of at least 200ms (1000@1s)", a)
		}
		runs = append(runs, scaleRunSpec{sessions: n, window: w})
	}
	if len(runs) == 0 {
		return nil, errors.New("-scale-runs: want at least one COUNT@WINDOW")
	}
	return runs, nil
}
