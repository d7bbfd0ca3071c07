package leasemcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// serviceEnv runs the service on the memory backend with short TTLs
// allowed.
var serviceEnv = map[string]string{"LEASESVC_MIN_TTL": "200ms", "LEASESVC_LOG_LEVEL": "warn"}

// startService runs leasesvc with serviceEnv; the test may freeze it.
func startService(t *testing.T) *e2e.Service {
	t.Helper()
	return e2e.StartService(t, serviceEnv)
}

// sdkClient returns a Go SDK client of the service, to check what the MCP
// sessions did.
func sdkClient(t *testing.T, svc *e2e.Service) *client.Client {
	t.Helper()
	c, err := client.New(svc.URL, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// session is one `leasectl mcp` subprocess driven by the Go SDK's MCP
// client.
type session struct {
	t      *testing.T
	holder string
	cmd    *exec.Cmd
	cs     *mcp.ClientSession
	stderr *e2e.SyncBuffer
	//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
	logs   chan *mcp.LoggingMessageParams
	update chan string // URIs of resources/updated notifications
	closed bool
}

// startSession runs `leasectl mcp` against url and initializes an MCP
// session with it.
func startSession(t *testing.T, url, holder string, ttl time.Duration) *session {
	t.Helper()
	s := &session{t: t, holder: holder, stderr: &e2e.SyncBuffer{}, update: make(chan string, 100)}
	//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
	s.logs = make(chan *mcp.LoggingMessageParams, 100)
	s.cmd = exec.Command(e2e.Build(t, "./cmd/leasectl"), "mcp", "--url", url, "--holder", holder, "--ttl", ttl.String(), "--log-level", "info")
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := mcp.NewClient(&mcp.Implementation{Name: "leasemcp-test", Version: "1"}, &mcp.ClientOptions{
		//lint:ignore SA1019 the server still sends logging notifications (see notifyLost)
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			select {
			case s.logs <- r.Params:
			default:
			}
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			select {
			case s.update <- r.Params.URI:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: s.cmd, TerminateDuration: 20 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to leasectl mcp: %v\n%s", err, s.stderr.String())
	}
	s.cs = cs
	t.Cleanup(func() {
		if !s.closed {
			_ = s.cs.Close()
		}
		if t.Failed() {
			t.Logf("leasectl mcp --holder %s stderr:\n%s", holder, s.stderr.String())
		}
	})
	return s
}

// close ends the session as a client does: it closes stdin and waits for
// leasectl to exit; it fails the test if leasectl needed a signal.
func (s *session) close() {
	s.t.Helper()
	start := time.Now()
	err := s.cs.Close()
	s.closed = true
	if err != nil {
		s.t.Fatalf("close session %s: %v\n%s", s.holder, err, s.stderr.String())
	}
	if d := time.Since(start); d > 15*time.Second {
		s.t.Fatalf("leasectl mcp took %v to exit after stdin closed", d)
	}
}

// call calls a tool and decodes its structured result into out. A tool
// error is returned as an error.
func (s *session) call(tool string, args any, out any) error {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		s.t.Fatalf("%s: %v\n%s", tool, err, s.stderr.String())
	}
	if res.IsError {
		return fmt.Errorf("%s: %s", tool, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		s.t.Fatalf("%s: %v", tool, err)
	}
	reflect.ValueOf(out).Elem().SetZero() // no field left over from a previous call
	if err := json.Unmarshal(b, out); err != nil {
		s.t.Fatalf("%s: decode %s: %v", tool, b, err)
	}
	return nil
}

// mustCall is call that fails the test on a tool error.
func (s *session) mustCall(tool string, args any, out any) {
	s.t.Helper()
	if err := s.call(tool, args, out); err != nil {
		s.t.Fatalf("%v\n%s", err, s.stderr.String())
	}
}

func text(res *mcp.CallToolResult) string {
	var b []byte
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b = append(b, tc.Text...)
		}
	}
	return string(b)
}

// resolve checks that a schema from tools/list is a valid JSON schema and
// returns it resolved.
func resolve(t *testing.T, tool, which string, raw any) *jsonschema.Resolved {
	t.Helper()
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	var sc jsonschema.Schema
	if err := json.Unmarshal(b, &sc); err != nil {
		t.Fatalf("%s %s schema is not a JSON schema: %v\n%s", tool, which, err, b)
	}
	if sc.Type != "object" {
		t.Fatalf("%s %s schema has type %q, want object", tool, which, sc.Type)
	}
	r, err := sc.Resolve(nil)
	if err != nil {
		t.Fatalf("%s %s schema does not resolve: %v\n%s", tool, which, err, b)
	}
	return r
}
