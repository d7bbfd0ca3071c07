package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/audit"
)

// lockedBuffer is a bytes.Buffer safe for the handler's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, rec["audit"].(map[string]any))
	}
	return out
}

// TestSourceRefusalsAreAudited: a 403 origin_not_allowed or
// host_not_allowed, on a lease route or the session upgrade, writes one
// audit line naming the operation, the code and the lease (principal ""),
// and a request that passes writes none.
func TestSourceRefusalsAreAudited(t *testing.T) {
	var buf lockedBuffer
	srv := sourceServer(t, httpapi.Config{Audit: audit.New(slog.New(slog.NewJSONHandler(&buf, nil)))})
	for _, tc := range []struct {
		method, path, host, origin string
		status                     int
		want                       map[string]any
	}{
		{"POST", "/v1/leases/team-a.s:acquire", "", "https://evil.example", 403,
			map[string]any{"action": "acquire", "outcome": "origin_not_allowed", "lease": "team-a.s", "principal": ""}},
		{"GET", "/v1/leases?prefix=team-a.", "rebound.example", "", 403,
			map[string]any{"action": "list", "outcome": "host_not_allowed", "lease": "team-a.", "principal": ""}},
		{"GET", httpapi.SessionsPath, "rebound.example", "", 403,
			map[string]any{"action": "connect", "outcome": "host_not_allowed", "lease": ""}},
		{"GET", "/v1/leases/team-a.s", "", "", 404, nil},
	} {
		before := len(buf.lines(t))
		r := send(t, srv, tc.method, tc.path, tc.host, "application/json", tc.origin, `{"holder":"h","ttlMs":1000}`)
		if r.Status != tc.status {
			t.Fatalf("%s %s = %d %s; want %d", tc.method, tc.path, r.Status, r.Raw, tc.status)
		}
		lines := buf.lines(t)[before:]
		if tc.want == nil {
			if len(lines) != 0 {
				t.Errorf("%s %s served, yet audited: %v", tc.method, tc.path, lines)
			}
			continue
		}
		if len(lines) != 1 {
			t.Fatalf("%s %s: %d audit lines %v; want 1", tc.method, tc.path, len(lines), lines)
		}
		for k, v := range tc.want {
			if lines[0][k] != v {
				t.Errorf("%s %s: audit %s = %v; want %v (line %v)", tc.method, tc.path, k, lines[0][k], v, lines[0])
			}
		}
		if d, _ := lines[0]["detail"].(string); d == "" {
			t.Errorf("%s %s: audit line without detail", tc.method, tc.path)
		}
	}
}
