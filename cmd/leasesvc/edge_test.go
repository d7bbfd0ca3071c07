package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/overload"
)

// TestEdgeSettings: the edge limits' defaults (per address off on Cloud
// Run), overrides, and refusals naming the setting.
func TestEdgeSettings(t *testing.T) {
	e, err := parseEdge(envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if e != (edge{maxHeaderBytes: 64 << 10, maxConns: 1500, maxConnsPerAddr: 1024, overloadSoft: overload.DefaultSoft, overloadHard: overload.DefaultHard}) {
		t.Fatalf("defaults %+v", e)
	}
	if e, _ := parseEdge(envOf(map[string]string{"K_SERVICE": "leasesvc"})); e.maxConnsPerAddr != 0 || e.maxConns != 1500 {
		t.Fatalf("on Cloud Run %+v; want no per-address limit", e)
	}
	e, err = parseEdge(envOf(map[string]string{"LEASESVC_MAX_HEADER_BYTES": "8192", "LEASESVC_MAX_CONNECTIONS": "0",
		"LEASESVC_MAX_CONNECTIONS_PER_ADDRESS": "5", "LEASESVC_OVERLOAD_SOFT": "0", "LEASESVC_OVERLOAD_HARD": "0"}))
	if err != nil || e != (edge{maxHeaderBytes: 8192, maxConnsPerAddr: 5}) {
		t.Fatalf("overrides %+v, %v", e, err)
	}
	for env, want := range map[string]string{
		"LEASESVC_MAX_HEADER_BYTES=100":          "LEASESVC_MAX_HEADER_BYTES",
		"LEASESVC_MAX_CONNECTIONS=-1":            "LEASESVC_MAX_CONNECTIONS",
		"LEASESVC_MAX_CONNECTIONS_PER_ADDRESS=x": "LEASESVC_MAX_CONNECTIONS_PER_ADDRESS",
		"LEASESVC_OVERLOAD_SOFT=400000000":       "LEASESVC_OVERLOAD_SOFT",
		"LEASESVC_OVERLOAD_HARD=0":               "set both to 0",
		"LEASESVC_OVERLOAD_SOFT=1MiB":            "LEASESVC_OVERLOAD_SOFT",
	} {
		k, v, _ := strings.Cut(env, "=")
		if _, err := parseEdge(envOf(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming %s", env, err, want)
		}
	}
	srv := newServer(t.Context(), http.NotFoundHandler(), limits{edge: edge{maxHeaderBytes: 8192}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if srv.MaxHeaderBytes != 8192 {
		t.Fatalf("MaxHeaderBytes %d", srv.MaxHeaderBytes)
	}
}

// TestEdgeLimitsOfTheRunningService: the service refuses headers past
// LEASESVC_MAX_HEADER_BYTES with 431 and, past LEASESVC_MAX_CONNECTIONS,
// answers a new connection 503 before any HTTP work.
func TestEdgeLimitsOfTheRunningService(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout e2e.SyncBuffer
	env := map[string]string{"LEASESVC_MAX_CONNECTIONS": "2"}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-port", "0"}, envOf(env), &stdout, &bytes.Buffer{}) }()
	if !stdout.Await(10*time.Second, contains("leasesvc listening")) {
		t.Fatalf("no listening line in 10s: %s", stdout.String())
	}
	addr := regexp.MustCompile(`"addr":"([^"]+)"`).FindStringSubmatch(stdout.String())[1]
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c, bufio.NewReader(c)
	}
	get := func(c net.Conn, br *bufio.Reader, headers string) int {
		fmt.Fprintf(c, "GET /v1/leases/x HTTP/1.1\r\nHost: localhost\r\n%s\r\n", headers)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	a, abr := dial()
	b, bbr := dial()
	if get(a, abr, "") != http.StatusNotFound || get(b, bbr, "") != http.StatusNotFound {
		t.Fatal("two plain requests were not answered 404 (no such lease)")
	}
	_, cbr := dial() // a third connection: refused before any request
	if resp, err := http.ReadResponse(cbr, nil); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third connection past LEASESVC_MAX_CONNECTIONS=2: %v %v; want 503 before any request", resp, err)
	}
	_ = a.Close() // its place comes back once the server has seen it go
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, dbr := dial()
		st := get(d, dbr, "X-Pad: "+strings.Repeat("a", 100<<10)+"\r\n")
		if st == http.StatusRequestHeaderFieldsTooLarge {
			break
		}
		if st != 0 && st != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("100 KiB of headers: %d; want 431", st)
		}
		_ = d.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
