package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestServiceOverHTTP drives the real binary, memory backend, through the
// lease flows and every malformed input of docs/contract.md §4.
func TestServiceOverHTTP(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_BACKEND": "memory"})
	e2e.Flows(t, svc.URL)
	took, err := svc.Stop()
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, svc.Output())
	}
	t.Logf("exited %v after SIGTERM", took)
	if out := svc.Output(); !strings.Contains(out, `"message":"leasesvc stopped"`) || strings.Contains(out, `"severity":"ERROR"`) {
		t.Fatalf("log does not show a clean stop:\n%s", out)
	}
}

// TestSIGTERMEndsWaitsAndStreams sends SIGTERM to the real binary while
// acquires wait (60 s) for a held lease and a :watch stream is open: every
// waiting acquire is answered at once with 503 unavailable and
// Retry-After: 1, the stream ends, and the process exits cleanly within
// 9 s (Cloud Run kills at 10 s). With Pub/Sub events, the emulator test
// TestSIGTERMFlushesEventsAndDeletesSubscription covers the rest.
func TestSIGTERMEndsWaitsAndStreams(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_TELEMETRY": "stdout"})
	took := e2e.Shutdown(t, svc, nil)
	out := svc.Output()
	if i := strings.Index(out, "shutting down"); i < 0 || !strings.Contains(out[i:], `"Name":"leasesvc.`) {
		t.Errorf("no metrics flushed after the shutdown began:\n%.3000s", out[max(i, 0):])
	}
	t.Logf("exited %v after SIGTERM", took)
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	cases := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"PORT": "http"}, nil, "PORT"},
		{map[string]string{"PORT": "70000"}, nil, "PORT"},
		{map[string]string{"LEASESVC_BACKEND": "redis"}, nil, "LEASESVC_BACKEND"},
		{map[string]string{"LEASESVC_MIN_TTL": "soon"}, nil, "LEASESVC_MIN_TTL"},
		{map[string]string{"LEASESVC_MIN_TTL": "1500us"}, nil, "LEASESVC_MIN_TTL"},
		{map[string]string{"LEASESVC_MAX_TTL": "500ms"}, nil, "LEASESVC_MAX_TTL"},
		{map[string]string{"LEASESVC_LOG_LEVEL": "loud"}, nil, "LEASESVC_LOG_LEVEL"},
		{map[string]string{"LEASESVC_DRAIN_TIMEOUT": "-1s"}, nil, "LEASESVC_DRAIN_TIMEOUT"},
		{map[string]string{"LEASESVC_DRAIN_TIMEOUT": "9s"}, nil, "LEASESVC_SHUTDOWN_TIMEOUT"},
		{map[string]string{"LEASESVC_BODY_TIMEOUT": "0s"}, nil, "LEASESVC_BODY_TIMEOUT"},
		{map[string]string{"LEASESVC_HEADER_TIMEOUT": "x"}, nil, "LEASESVC_HEADER_TIMEOUT"},
		{map[string]string{"LEASESVC_IDLE_TIMEOUT": "-1m"}, nil, "LEASESVC_IDLE_TIMEOUT"},
		{map[string]string{"LEASESVC_STREAM_LIFETIME": "forever"}, nil, "LEASESVC_STREAM_LIFETIME"},
		{map[string]string{"LEASESVC_READY_CACHE": "1"}, nil, "LEASESVC_READY_CACHE"},
		{map[string]string{"LEASESVC_WRITE_TIMEOUT": "0s"}, nil, "LEASESVC_WRITE_TIMEOUT"},
		{map[string]string{"LEASESVC_STREAM_BUFFER": "100"}, nil, "LEASESVC_STREAM_BUFFER"},
		{map[string]string{"LEASESVC_MAX_PAGE_BYTES": "1000000000"}, nil, "LEASESVC_MAX_PAGE_BYTES"},
		{map[string]string{"LEASESVC_SHUTDOWN_TIMEOUT": "0"}, nil, "LEASESVC_SHUTDOWN_TIMEOUT"},
		{map[string]string{"LEASESVC_MAX_STREAMS": "0"}, nil, "LEASESVC_MAX_STREAMS"},
		{map[string]string{"LEASESVC_MAX_STREAMS_PER_CALLER": "many"}, nil, "LEASESVC_MAX_STREAMS_PER_CALLER"},
		{map[string]string{"LEASESVC_MAX_WAITING": "-5"}, nil, "LEASESVC_MAX_WAITING"},
		{map[string]string{"LEASESVC_MAX_WAITING_PER_CALLER": "1.5"}, nil, "LEASESVC_MAX_WAITING_PER_CALLER"},
		{map[string]string{"LEASESVC_PAGE_TOKEN_KEY": "c2hvcnQ="}, nil, "LEASESVC_PAGE_TOKEN_KEY"},
		{map[string]string{"LEASESVC_LISTEN": "everywhere"}, nil, "LEASESVC_LISTEN"},
		{map[string]string{"LEASESVC_TELEMETRY": "jaeger"}, nil, "LEASESVC_TELEMETRY"},
		{map[string]string{"LEASESVC_INSTANCE_ID": "Bad_ID"}, nil, "LEASESVC_INSTANCE_ID"},
		{map[string]string{"LEASESVC_PUBSUB_TOPIC": "x"}, nil, "LEASESVC_PUBSUB_TOPIC"},
		{map[string]string{"LEASESVC_PUBSUB_TOPIC": "leasesvc-events"}, nil, "LEASESVC_PROJECT"},
		{nil, []string{"-backend", "etcd"}, "-backend"},
		{nil, []string{"-nope"}, "flags"},
		{nil, []string{"extra"}, "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.want+fmt.Sprint(tc.env, tc.args), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string { return tc.env[k] }
			err := run(t.Context(), tc.args, getenv, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestConfigDefaultsAndOverrides(t *testing.T) {
	env := map[string]string{"PORT": "9000", "LEASESVC_MIN_TTL": "100ms", "LEASESVC_MAX_TTL": "2m", "LEASESVC_LOG_LEVEL": "DEBUG"}
	c, err := parseConfig([]string{"-port", "9001"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.port != 9001 || c.backend != "memory" || c.minTTL != 100*time.Millisecond || c.maxTTL != 2*time.Minute || c.logLevel.String() != "DEBUG" {
		t.Fatalf("config %+v, want flag port 9001 over env, memory, 100ms, 2m, DEBUG", c)
	}
}

// TestRunStopsOnContextCancel runs the service in-process and stops it by
// cancelling its context, as SIGTERM does in main.
func TestRunStopsOnContextCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var stdout e2e.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-port", "0"}, func(string) string { return "" }, &stdout, &bytes.Buffer{})
	}()
	if !stdout.Await(10*time.Second, contains("leasesvc listening")) {
		t.Fatalf("no listening line in 10s: %s", stdout.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of cancel")
	}
}

// contains returns a condition for await: s was written.
func contains(s string) func(string) bool {
	return func(out string) bool { return strings.Contains(out, s) }
}
