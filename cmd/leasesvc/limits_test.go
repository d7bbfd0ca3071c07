package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestLimitsDefaultsAndOverrides: every limit of docs/contract.md §9 has
// its default, and its setting overrides it.
func TestLimitsDefaultsAndOverrides(t *testing.T) {
	l, err := parseLimits(envOf(nil), "static")
	if err != nil {
		t.Fatal(err)
	}
	want := httpapi.Limits{BodyTimeout: 10 * time.Second, StreamsPerCaller: 100, Streams: 10000, StreamLifetime: time.Hour,
		WaitingPerCaller: 100, Waiting: 10000, ReadyCache: time.Second, StreamRefresh: time.Second, RefreshPrefixes: 64, ListScanBudget: 10000,
		WriteTimeout: 30 * time.Second, StreamBuffer: 256 << 10, PageBytes: 4 << 20}
	if st := l.api.Memory.Stats(); st.Total != 112<<20 || st.Share != 28<<20 {
		t.Fatalf("default memory budget %+v; want 112 MiB, 28 MiB a caller", st)
	}
	l.api.Memory = nil
	if l.api != want || l.headerTimeout != 10*time.Second || l.idleTimeout != 2*time.Minute || l.shutdown != 9*time.Second || l.pageTokenKey != nil || l.listenHost != "" {
		t.Fatalf("defaults %+v", l)
	}
	l, err = parseLimits(envOf(map[string]string{
		"LEASESVC_BODY_TIMEOUT": "3s", "LEASESVC_HEADER_TIMEOUT": "4s", "LEASESVC_IDLE_TIMEOUT": "5m", "LEASESVC_STREAM_LIFETIME": "10m",
		"LEASESVC_READY_CACHE": "2s", "LEASESVC_SHUTDOWN_TIMEOUT": "8s", "LEASESVC_MAX_STREAMS_PER_CALLER": "7", "LEASESVC_MAX_STREAMS": "70",
		"LEASESVC_MAX_WAITING_PER_CALLER": "8", "LEASESVC_MAX_WAITING": "80", "LEASESVC_PAGE_TOKEN_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		"LEASESVC_LISTEN": "::", "LEASESVC_STREAM_REFRESH": "2500ms", "LEASESVC_MAX_REFRESH_PREFIXES": "9", "LEASESVC_LIST_SCAN_BUDGET": "50",
		"LEASESVC_WRITE_TIMEOUT": "7s", "LEASESVC_STREAM_BUFFER": "65536", "LEASESVC_MAX_PAGE_BYTES": "100000",
	}), "none")
	if err != nil {
		t.Fatal(err)
	}
	want = httpapi.Limits{BodyTimeout: 3 * time.Second, StreamsPerCaller: 7, Streams: 70, StreamLifetime: 10 * time.Minute,
		WaitingPerCaller: 8, Waiting: 80, ReadyCache: 2 * time.Second, StreamRefresh: 2500 * time.Millisecond, RefreshPrefixes: 9, ListScanBudget: 50,
		WriteTimeout: 7 * time.Second, StreamBuffer: 65536, PageBytes: 100000}
	l.api.Memory = nil
	if l.api != want || l.headerTimeout != 4*time.Second || l.idleTimeout != 5*time.Minute || l.shutdown != 8*time.Second || len(l.pageTokenKey) != 32 || l.pageTokenKey[31] != 31 || l.listenHost != "::" {
		t.Fatalf("overrides %+v", l)
	}
}

// TestMemorySettings: LEASESVC_MEMORY_BUDGET and LEASESVC_MEMORY_PER_CALLER
// make the budget (docs/contract.md §16); a bad value, or a share larger
// than the budget, is refused naming the setting.
func TestMemorySettings(t *testing.T) {
	l, err := parseLimits(envOf(map[string]string{"LEASESVC_MEMORY_BUDGET": "67108864", "LEASESVC_MEMORY_PER_CALLER": "8388608"}), "static")
	if err != nil {
		t.Fatal(err)
	}
	if st := l.api.Memory.Stats(); st.Total != 64<<20 || st.Share != 8<<20 {
		t.Fatalf("budget %+v; want 64 MiB, 8 MiB a caller", st)
	}
	// A budget smaller than the default share, set alone: one caller may use it all.
	if l, err := parseLimits(envOf(map[string]string{"LEASESVC_MEMORY_BUDGET": "16777216"}), "static"); err != nil || l.api.Memory.Share() != 16<<20 {
		t.Fatalf("budget 16 MiB alone: share %d, %v; want 16 MiB", l.api.Memory.Share(), err)
	}
	for _, env := range []map[string]string{
		{"LEASESVC_MEMORY_BUDGET": "lots"}, {"LEASESVC_MEMORY_BUDGET": "0"}, {"LEASESVC_MEMORY_BUDGET": "1024"},
		{"LEASESVC_MEMORY_PER_CALLER": "-1"}, {"LEASESVC_MEMORY_BUDGET": "16777216", "LEASESVC_MEMORY_PER_CALLER": "33554432"},
	} {
		_, err := parseLimits(envOf(env), "static")
		named := false
		for k := range env {
			named = named || err != nil && strings.Contains(err.Error(), k)
		}
		if !named {
			t.Errorf("env %v: %v; want an error naming the setting", env, err)
		}
	}
}

// TestStreamRefreshSetting: LEASESVC_STREAM_REFRESH=0 turns refresh
// events off; a negative, unparsable or tiny value is refused, naming it.
func TestStreamRefreshSetting(t *testing.T) {
	l, err := parseLimits(envOf(map[string]string{"LEASESVC_STREAM_REFRESH": "0"}), "static")
	if err != nil || l.api.StreamRefresh != httpapi.StreamRefreshOff {
		t.Fatalf("LEASESVC_STREAM_REFRESH=0: %v, %v; want off", l.api.StreamRefresh, err)
	}
	for _, v := range []string{"-1s", "soon", "1ms", "1"} {
		if _, err := parseLimits(envOf(map[string]string{"LEASESVC_STREAM_REFRESH": v}), "static"); err == nil || !strings.Contains(err.Error(), "LEASESVC_STREAM_REFRESH") {
			t.Errorf("LEASESVC_STREAM_REFRESH=%q: %v, want an error naming it", v, err)
		}
	}
}

// TestAuthNoneListensOnLoopback: with LEASESVC_AUTH=none the service
// listens on loopback only, unless LEASESVC_LISTEN says otherwise or it runs
// on Cloud Run; with authentication it listens on every interface.
func TestAuthNoneListensOnLoopback(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "127.0.0.1"},
		{map[string]string{"LEASESVC_LISTEN": "0.0.0.0"}, "0.0.0.0"},
		{map[string]string{"K_SERVICE": "leasesvc"}, ""},
		{map[string]string{"K_SERVICE": "leasesvc", "LEASESVC_LISTEN": "127.0.0.1"}, "127.0.0.1"},
	} {
		l, err := parseLimits(envOf(tc.env), "none")
		if err != nil || l.listenHost != tc.want {
			t.Errorf("env %v: listen host %q, %v; want %q", tc.env, l.listenHost, err, tc.want)
		}
	}
	if l, _ := parseLimits(envOf(nil), "google"); l.listenHost != "" {
		t.Errorf("with auth: listen host %q, want every interface", l.listenHost)
	}
	// The real start-up line says where it listens.
	ctx, cancel := context.WithCancel(t.Context())
	var stdout e2e.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-port", "0"}, envOf(nil), &stdout, io.Discard) }()
	stdout.Await(10*time.Second, contains("leasesvc listening"))
	cancel()
	<-done
	if !strings.Contains(stdout.String(), `"addr":"127.0.0.1:`) {
		t.Fatalf("start-up line does not show a loopback address:\n%s", stdout.String())
	}
}

// TestServerTimeouts: headers within the header timeout, idle keep-alive
// connections closed after the idle timeout, and no whole-request timeout
// (the handler bounds bodies; streams and waits must last).
func TestServerTimeouts(t *testing.T) {
	l, _ := parseLimits(envOf(map[string]string{"LEASESVC_HEADER_TIMEOUT": "3s", "LEASESVC_IDLE_TIMEOUT": "1m"}), "static")
	srv := newServer(t.Context(), http.NotFoundHandler(), l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if srv.ReadHeaderTimeout != 3*time.Second || srv.IdleTimeout != time.Minute || srv.ReadTimeout != 0 || srv.WriteTimeout != 0 {
		t.Fatalf("server timeouts: header %v idle %v read %v write %v", srv.ReadHeaderTimeout, srv.IdleTimeout, srv.ReadTimeout, srv.WriteTimeout)
	}
}

// TestCloudRunAudience: without LEASESVC_AUTH_AUDIENCES the audience is
// derived only on Cloud Run, from K_SERVICE and the metadata server.
func TestCloudRunAudience(t *testing.T) {
	md := func(_ context.Context, path string) (string, error) {
		switch path {
		case "project/numeric-project-id":
			return "123456789012", nil
		case "instance/region":
			return "projects/123456789012/regions/europe-west1", nil
		}
		return "", errors.New("no such key")
	}
	aud, err := cloudRunAudience(t.Context(), envOf(map[string]string{"K_SERVICE": "leasesvc"}), md)
	if err != nil || aud != "https://leasesvc-123456789012.europe-west1.run.app" {
		t.Fatalf("audience = %q, %v", aud, err)
	}
	if _, err := cloudRunAudience(t.Context(), envOf(nil), md); err == nil || !strings.Contains(err.Error(), "LEASESVC_AUTH_AUDIENCES") {
		t.Fatalf("off Cloud Run = %v, want an error naming LEASESVC_AUTH_AUDIENCES", err)
	}
	down := func(context.Context, string) (string, error) { return "", errors.New("metadata server unreachable") }
	if _, err := cloudRunAudience(t.Context(), envOf(map[string]string{"K_SERVICE": "leasesvc"}), down); err == nil || !strings.Contains(err.Error(), "LEASESVC_AUTH_AUDIENCES") {
		t.Fatalf("metadata down = %v, want an error naming LEASESVC_AUTH_AUDIENCES", err)
	}
	var stderr bytes.Buffer
	err = run(t.Context(), nil, envOf(map[string]string{"LEASESVC_AUTH": "google", "LEASESVC_POLICY": "/nonexistent"}), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "LEASESVC_AUTH_AUDIENCES") {
		t.Fatalf("google auth without audiences off Cloud Run: run = %v, want an error naming LEASESVC_AUTH_AUDIENCES", err)
	}
}

// TestRetainFree: LEASESVC_RETAIN_FREE is off by default and with "off",
// takes a duration of at least a minute, and refuses anything else.
func TestRetainFree(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "off": 0, "720h": 720 * time.Hour, "1m": time.Minute} {
		l, err := parseLimits(envOf(map[string]string{"LEASESVC_RETAIN_FREE": v}), "static")
		if err != nil || l.retainFree != want {
			t.Errorf("LEASESVC_RETAIN_FREE=%q: %v, %v; want %v", v, l.retainFree, err, want)
		}
	}
	for _, v := range []string{"59s", "0", "-1h", "forever"} {
		if _, err := parseLimits(envOf(map[string]string{"LEASESVC_RETAIN_FREE": v}), "static"); err == nil || !strings.Contains(err.Error(), "LEASESVC_RETAIN_FREE") {
			t.Errorf("LEASESVC_RETAIN_FREE=%q: %v, want an error naming it", v, err)
		}
	}
}

// TestAllowedHostsWithoutAuth: with LEASESVC_AUTH=none and listening
// beyond loopback, the service warns that only loopback names are served
// until LEASESVC_ALLOWED_HOSTS lists the names clients use, and serves a
// request addressed to such a name only once it is listed.
func TestAllowedHostsWithoutAuth(t *testing.T) {
	for _, tc := range []struct {
		env    map[string]string
		warn   bool
		status int
	}{
		{map[string]string{"LEASESVC_LISTEN": "0.0.0.0"}, true, http.StatusForbidden},
		{map[string]string{"LEASESVC_LISTEN": "0.0.0.0", "LEASESVC_ALLOWED_HOSTS": "leasesvc.internal"}, false, http.StatusOK},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		var stdout e2e.SyncBuffer
		done := make(chan error, 1)
		go func() { done <- run(ctx, []string{"-port", "0"}, envOf(tc.env), &stdout, io.Discard) }()
		addr := regexp.MustCompile(`"addr":"[^"]*:([0-9]+)"`)
		stdout.Await(10*time.Second, func(out string) bool { return addr.MatchString(out) }) // the start-up line
		m := addr.FindStringSubmatch(stdout.String())
		if m == nil {
			cancel()
			<-done
			t.Fatalf("env %v: no start-up line with the address:\n%s", tc.env, stdout.String())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+m[1]+"/v1/leases", nil)
		req.Host = "leasesvc.internal"
		resp, err := http.DefaultClient.Do(req)
		status := 0
		if err == nil {
			status = resp.StatusCode
			_ = resp.Body.Close()
		}
		cancel()
		<-done
		if status != tc.status {
			t.Errorf("env %v: list with Host leasesvc.internal = %d (%v), want %d", tc.env, status, err, tc.status)
		}
		if got := strings.Contains(stdout.String(), "LEASESVC_ALLOWED_HOSTS"); got != tc.warn {
			t.Errorf("env %v: warning about LEASESVC_ALLOWED_HOSTS logged %v, want %v:\n%s", tc.env, got, tc.warn, stdout.String())
		}
	}
}

// TestSoftLimit: without GOMEMLIMIT the runtime's soft memory limit is the
// budget plus 64 MiB; with it, GOMEMLIMIT's stays.
func TestSoftLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	l, err := parseLimits(envOf(map[string]string{"LEASESVC_MEMORY_BUDGET": "67108864"}), "static")
	if err != nil {
		t.Fatal(err)
	}
	l.applySoftLimit(envOf(nil))
	if got := debug.SetMemoryLimit(-1); got != 128<<20 || l.softLimit != got {
		t.Fatalf("soft limit %d (recorded %d); want the 64 MiB budget + 64 MiB", got, l.softLimit)
	}
	debug.SetMemoryLimit(300 << 20) // as the runtime does with GOMEMLIMIT=300MiB
	l.applySoftLimit(envOf(map[string]string{"GOMEMLIMIT": "300MiB"}))
	if got := debug.SetMemoryLimit(-1); got != 300<<20 || l.softLimit != got {
		t.Fatalf("soft limit %d with GOMEMLIMIT=300MiB (recorded %d); want it kept", got, l.softLimit)
	}
}
