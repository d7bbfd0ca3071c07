package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestMain lets the test binary serve as the agent processes of
// sessiontakeover, as leasebench itself does.
func TestMain(m *testing.M) {
	if spec := os.Getenv(agentEnv); spec != "" {
		os.Exit(agentMain(spec))
	}
	os.Exit(m.Run())
}

func TestParseConfig(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	cases := []struct {
		name    string
		args    []string
		getenv  func(string) string
		wantErr string
		check   func(t *testing.T, c config)
	}{
		{name: "defaults", args: nil, getenv: env(), check: func(t *testing.T, c config) {
			if len(c.urls) != 1 || c.backend != "memory" || len(c.scenarios) != len(defaultScenarios) || c.agents[0] != 1000 ||
				len(c.pauses) != 2 || c.pauses[1] != 50*time.Millisecond || !strings.HasPrefix(c.prefix, "leasebench.") {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{name: "lists", args: []string{"-url", "http://a:1/,http://b:2", "-scenarios", "events,latency", "-agents", "1000,10000", "-contender-pauses", "0,1ms"}, getenv: env(),
			check: func(t *testing.T, c config) {
				if strings.Join(c.urls, " ") != "http://a:1 http://b:2" || strings.Join(c.scenarios, ",") != "latency,events" ||
					len(c.agents) != 2 || c.agents[1] != 10000 || c.pauses[1] != time.Millisecond {
					t.Errorf("lists: %+v", c)
				}
			}},
		{name: "backend from env", args: nil, getenv: env("LEASESVC_BACKEND", "spanner", "LEASESVC_SPANNER_DATABASE", "projects/p/instances/i/databases/d"),
			check: func(t *testing.T, c config) {
				if c.backend != "spanner" || c.spannerDatabase == "" {
					t.Errorf("env: %+v", c)
				}
			}},
		{name: "agent instances", args: []string{"-url", "http://a:1,http://b:2", "-agent-instances", "1"}, getenv: env(),
			check: func(t *testing.T, c config) {
				if c.agentURLs != 1 || len(c.urls) != 2 {
					t.Errorf("agent instances: %+v", c)
				}
			}},
		{name: "more agent instances than urls", args: []string{"-url", "http://a:1,http://b:2", "-agent-instances", "3"}, getenv: env(), wantErr: "-agent-instances"},
		{name: "bad url", args: []string{"-url", "localhost:8080"}, getenv: env(), wantErr: "-url"},
		{name: "unknown scenario", args: []string{"-scenarios", "latency,speed"}, getenv: env(), wantErr: "speed"},
		{name: "bad agents", args: []string{"-agents", "ten"}, getenv: env(), wantErr: "-agents"},
		{name: "bad pause", args: []string{"-contender-pauses", "fast"}, getenv: env(), wantErr: "-contender-pauses"},
		{name: "bad backend", args: []string{"-backend", "redis"}, getenv: env(), wantErr: "redis"},
		{name: "ttl too short", args: []string{"-ttl", "500ms"}, getenv: env(), wantErr: "-ttl"},
		{name: "firestore without project", args: []string{"-backend", "firestore"}, getenv: env(), wantErr: "LEASESVC_PROJECT"},
		{name: "spanner without database", args: []string{"-backend", "spanner"}, getenv: env(), wantErr: "LEASESVC_SPANNER_DATABASE"},
		{name: "unknown flag", args: []string{"-speed", "1"}, getenv: env(), wantErr: "flags"},
		{name: "stray argument", args: []string{"latency"}, getenv: env(), wantErr: "unexpected"},
		{name: "session scenarios", args: []string{"-scenarios", "sessionscale,sessiontakeover", "-leasesvc", "/bin/leasesvc", "-session-windows", "200ms", "-sessions", "10,20"}, getenv: env(),
			check: func(t *testing.T, c config) {
				if strings.Join(c.scenarios, ",") != "sessiontakeover,sessionscale" || len(c.sessionWindows) != 1 || c.sessionWindows[0] != 200*time.Millisecond ||
					len(c.scaleSessions) != 2 || c.leasesvc != "/bin/leasesvc" {
					t.Errorf("session scenarios: %+v", c)
				}
			}},
		{name: "scale runs", args: []string{"-scale-runs", "1000@1s,900@200ms"}, getenv: env(),
			check: func(t *testing.T, c config) {
				if fmt.Sprint(c.scaleRuns) != "[1000@1s 900@200ms]" {
					t.Errorf("scale runs: %v", c.scaleRuns)
				}
			}},
		{name: "sessions replace scale runs", args: []string{"-sessions", "10,20", "-scale-window", "300ms"}, getenv: env(),
			check: func(t *testing.T, c config) {
				if fmt.Sprint(c.scaleRuns) != "[10@300ms 20@300ms]" {
					t.Errorf("scale runs: %v", c.scaleRuns)
				}
			}},
		{name: "scale run window too short", args: []string{"-scale-runs", "10@100ms"}, getenv: env(), wantErr: "-scale-runs"},
		{name: "scale without a binary", args: []string{"-scenarios", "sessionscale"}, getenv: env(), wantErr: "-leasesvc"},
		{name: "window too short", args: []string{"-session-windows", "100ms"}, getenv: env(), wantErr: "-session-windows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, tc.getenv, &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// TestScenariosOnMemory runs every scenario, briefly, against the real
// binary on the memory backend and checks the JSON report.
func TestScenariosOnMemory(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_MIN_TTL": "100ms", "LEASESVC_LOG_LEVEL": "warn"})
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	err := run(ctx, []string{"-url", svc.URL, "-json", "-n", "5", "-samples", "2", "-agents", "20", "-ttl", "1s", "-duration", "1s",
		"-contenders", "4", "-contender-pauses", "0,5ms", "-takeover-ttl", "200ms"}, func(string) string { return "" }, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, stdout.String())
	}
	seen := map[string]bool{}
	for _, r := range rep.Results {
		seen[strings.Fields(r.Scenario)[0]] = true
		if r.Metric == "contender answers other than lease_held" && r.Service != 0 {
			t.Errorf("contention: %v answers other than lease_held (%s)", r.Service, r.Note)
		}
		if strings.HasPrefix(r.Metric, "holdings lost") && r.Service != 0 {
			t.Errorf("throughput: %v holdings lost", r.Service)
		}
	}
	for _, s := range defaultScenarios {
		if !seen[s] {
			t.Errorf("no result of scenario %s in %s", s, stdout.String())
		}
	}
	if !strings.Contains(stderr.String(), "events: done") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
}

// TestSuccessionOnMemory runs the succession scenario briefly against the
// real binary on the memory backend and checks its rows: every figure is
// there, from every round, and the steps fit inside the whole.
func TestSuccessionOnMemory(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_MIN_TTL": "100ms", "LEASESVC_LOG_LEVEL": "warn"})
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"-url", svc.URL, "-json", "-scenarios", "succession", "-samples", "3", "-succession-renew", "50ms", "-succession-ttl", "1s"},
		func(string) string { return "" }, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, stdout.String())
	}
	got := map[string]row{}
	for _, r := range rep.Results {
		if r.Scenario != "succession" {
			t.Errorf("row of scenario %q", r.Scenario)
		}
		got[r.Metric] = r
	}
	for _, m := range []string{
		"join → the candidate leads p50", "join → the candidate leads p99",
		"step: join → the holder sees yieldRequested p50", "step: join → the holder sees yieldRequested p99",
		"step: release sent → the reserved candidate leads p50", "step: release sent → the reserved candidate leads p99",
		"step: server time: release → the candidate's acquireTime p50", "step: server time: release → the candidate's acquireTime p99",
	} {
		r, ok := got[m]
		switch {
		case !ok:
			t.Errorf("no row %q in %s", m, stdout.String())
		case r.N != 3 || r.Unit != "ms" || r.Service < 0:
			t.Errorf("row %q: %+v, want 3 samples in ms", m, r)
		}
	}
	if len(got) != 8 {
		t.Errorf("%d rows, want 8", len(got))
	}
	whole, release := got["join → the candidate leads p99"].Service, got["step: release sent → the reserved candidate leads p99"].Service
	if release > whole {
		t.Errorf("release → leads p99 %vms exceeds join → leads p99 %vms", release, whole)
	}
	// The holder renews every 50 ms: it is asked to yield at its next renewal.
	if y := got["step: join → the holder sees yieldRequested p99"].Service; y > 1000 {
		t.Errorf("the holder saw yieldRequested %vms after the join", y)
	}
}

// runReport runs leasebench with args and returns its report's rows by
// scenario and metric.
func runReport(t *testing.T, ctx context.Context, args []string, getenv func(string) string) map[string]row {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(ctx, append(args, "-json"), getenv, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	var rep report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, stdout.String())
	}
	got := map[string]row{}
	for _, r := range rep.Results {
		got[r.Scenario+": "+r.Metric] = r
	}
	return got
}

// need returns the row named key, failing the test without it.
func need(t *testing.T, rows map[string]row, key string) row {
	t.Helper()
	r, ok := rows[key]
	if !ok {
		keys := make([]string, 0, len(rows))
		for k := range rows {
			keys = append(keys, k)
		}
		t.Fatalf("no row %q; have %q", key, keys)
	}
	return r
}

// TestSessionScenariosOnMemory runs sessiontakeover, sessionwrites and
// sessionscale briefly against the real binary on the memory backend.
func TestSessionScenariosOnMemory(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rows := runReport(t, ctx, []string{"-url", svc.URL, "-scenarios", "sessiontakeover,sessionwrites,sessionscale", "-samples", "2",
		"-session-windows", "300ms", "-session-compare-ttls", "1s", "-write-duration", "2s", "-write-sessions", "2", "-write-leases", "2",
		"-leasesvc", e2e.Binary(t), "-scale-runs", "20@1s,10@200ms", "-scale-duration", "2s"}, func(string) string { return "" })
	for _, k := range []string{"crash takeover, session window 300ms p99", "crash takeover, plain renewals ttl 1s p99"} {
		if r := need(t, rows, "sessiontakeover: "+k); r.N != 2 || r.Service <= 0 {
			t.Errorf("%s: %+v, want 2 samples", k, r)
		}
	}
	sess := need(t, rows, "sessionwrites: writes per held lease per minute, sessions at window 1s (lease rows)")
	plain := need(t, rows, "sessionwrites: writes per held lease per minute, plain renewals ttl 1s")
	if plain.N == 0 || sess.Service >= plain.Service {
		t.Errorf("sessions %+v, plain renewals %+v: want fewer writes through sessions, and plain writes counted", sess, plain)
	}
	// How many expired depends on the machine's load: the row must be there.
	need(t, rows, "sessionscale 20 sessions at 1s: sessions expired or lapsed (lease lost, deadline passed, or not held at the end)")
	if r := need(t, rows, "sessionscale 20 sessions at 1s: heartbeats"); r.N == 0 {
		t.Errorf("no heartbeats counted: %+v", r)
	}
	need(t, rows, "sessionscale 20 sessions at 1s: instance CPU per 1,000 heartbeats")
	need(t, rows, "sessionscale 20 sessions at 1s: instance memory per session")
	// At the defaults but what one client address must have raised, and
	// saying so.
	if r := need(t, rows, "sessionscale 10 sessions at 200ms: heartbeats"); r.N == 0 || !strings.Contains(r.Note, "LEASESVC_MEMORY_PER_CALLER=") {
		t.Errorf("200ms run: %+v, want heartbeats and the settings it raised in its note", r)
	}
}

// TestSessionScenariosOnPostgres runs sessionwrites (the row trigger) and
// sessionfailover (SIGKILL and SIGTERM) briefly on a throwaway PostgreSQL.
func TestSessionScenariosOnPostgres(t *testing.T) {
	c := pgtest.Start(t)
	env := map[string]string{"LEASESVC_BACKEND": "postgres", "LEASESVC_POSTGRES_URL": c.URL, "LEASESVC_POSTGRES_MIGRATE": "true", "LEASESVC_LOG_LEVEL": "warn"}
	svc := e2e.StartService(t, env)
	for k, v := range env { // the instances sessionfailover starts inherit it
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rows := runReport(t, ctx, []string{"-url", svc.URL, "-scenarios", "sessionwrites,sessionfailover",
		"-write-duration", "2s", "-write-sessions", "2", "-write-leases", "2",
		"-leasesvc", e2e.Binary(t), "-failover-runs", "2", "-failover-sessions", "4", "-failover-leases", "3"}, os.Getenv)
	plain := need(t, rows, "sessionwrites: writes per held lease per minute, plain renewals ttl 1s")
	if plain.N == 0 {
		t.Errorf("the trigger counted no plain renewal: %+v", plain)
	}
	for _, sig := range []string{"SIGKILL", "SIGTERM"} {
		kept := need(t, rows, "sessionfailover "+sig+": leases that kept holder and token")
		if kept.N != 12 || kept.Service != 12 {
			t.Errorf("%s: %+v, want all 12 leases kept", sig, kept)
		}
	}
}
