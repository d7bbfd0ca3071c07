package leasemcp_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// rawSession is one `leasectl mcp` subprocess driven by hand-written
// JSON-RPC lines, as a careless client would write them.
type rawSession struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan []byte // lines of stdout; closed at its EOF
	stderr *e2e.SyncBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // its exit error, once exited is closed
}

// startRaw runs `leasectl mcp` against url and initializes an MCP session
// with it by hand.
func startRaw(t *testing.T, url, holder string, args ...string) *rawSession {
	t.Helper()
	s := &rawSession{t: t, lines: make(chan []byte, 100), stderr: &e2e.SyncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(e2e.Build(t, "./cmd/leasectl"), append([]string{"mcp", "--url", url, "--holder", holder, "--plain-renewals"}, args...)...)
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.lines)
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				s.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
		if t.Failed() {
			t.Logf("leasectl mcp --holder %s stderr:\n%s", holder, s.stderr.String())
		}
	})
	init := s.call(`"init"`, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	if _, ok := init["result"]; !ok {
		t.Fatalf("initialize answered %s", show(init))
	}
	s.send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	return s
}

// send writes line and its newline to leasectl's stdin.
func (s *rawSession) send(line []byte) {
	s.t.Helper()
	if _, err := s.in.Write(append(line, '\n')); err != nil {
		s.t.Fatalf("write %.80q: %v; leasectl mcp %s", line, err, s.state())
	}
}

// answer returns the next response on stdout, skipping the server's
// notifications and requests.
func (s *rawSession) answer() map[string]json.RawMessage {
	s.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("stdout closed before an answer: leasectl mcp %s", s.state())
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(line, &m); err != nil {
				s.t.Fatalf("stdout line %q is not a JSON object: %v", line, err)
			}
			if _, ok := m["method"]; !ok {
				return m
			}
		case <-timeout:
			s.t.Fatalf("no answer within 30s: leasectl mcp %s", s.state())
		}
	}
}

// call sends a request of raw id and params and returns its answer,
// which must carry the same id.
func (s *rawSession) call(id, method, params string) map[string]json.RawMessage {
	s.t.Helper()
	line := `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `"`
	if params != "" {
		line += `,"params":` + params
	}
	s.send([]byte(line + "}"))
	a := s.answer()
	if got := string(a["id"]); got != id {
		s.t.Fatalf("%s with id %s answered with id %s: %s", method, id, got, show(a))
	}
	return a
}

// state says whether the process still runs (given a second to exit,
// as its stdout may close just before), and what it printed.
func (s *rawSession) state() string {
	select {
	case <-s.exited:
		return fmt.Sprintf("exited (%v); stderr:\n%s", s.err, s.stderr.String())
	case <-time.After(time.Second):
		return "still runs; stderr:\n" + s.stderr.String()
	}
}

// wait closes stdin and waits for leasectl to exit.
func (s *rawSession) wait() error {
	s.t.Helper()
	_ = s.in.Close()
	select {
	case <-s.exited:
		return s.err
	case <-time.After(20 * time.Second):
		s.t.Fatalf("leasectl mcp did not exit within 20s of stdin's close; stderr:\n%s", s.stderr.String())
		return nil
	}
}

func show(m map[string]json.RawMessage) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// errorOf returns the error code of an answer and its raw id; ok is false
// for an answer without an error.
func errorOf(a map[string]json.RawMessage) (code int, id string, ok bool) {
	var e struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(a["error"], &e) != nil || e.Code == nil || e.Message == "" {
		return 0, string(a["id"]), false
	}
	return *e.Code, string(a["id"]), true
}

// malformedLines are lines a careless client may send, with the error
// code and the raw id of their answer.
var malformedLines = []struct {
	line string
	code int
	id   string
}{
	{`{}`, -32600, "null"},
	{`[]`, -32600, "null"},
	{`garbage`, -32700, "null"},
	{`[{"jsonrpc":"2.0","id":50,"method":"ping"},{"jsonrpc":"2.0","id":51,"method":"ping"}]`, -32600, "null"},
	{`[{"jsonrpc":"2.0","method":"notifications/initialized"}]`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":52,"method":"pi`, -32700, "null"},
	{`{"jsonrpc":"2.0","id":52,`, -32700, "null"},
	{"\xff\xfe", -32700, "null"},
	{"{\"jsonrpc\":\"2.0\",\"id\":\"\xc3\",\"method\":\"ping\"}", -32700, "null"},
	{`{"jsonrpc":"2.0","id":53,"method":"ping"} {"jsonrpc":"2.0","id":54,"method":"ping"}`, -32700, "null"},
	{`null`, -32600, "null"},
	{`42`, -32600, "null"},
	{`-1.5e3`, -32600, "null"},
	{`"ping"`, -32600, "null"},
	{`true`, -32600, "null"},
	{`{"id":55,"method":"ping"}`, -32600, "55"},
	{`{"jsonrpc":"1.0","id":56,"method":"ping"}`, -32600, "56"},
	{`{"jsonrpc":2.0,"id":57,"method":"ping"}`, -32600, "57"},
	{`{"jsonrpc":"2.0","id":58}`, -32600, "58"},
	{`{"jsonrpc":"2.0","id":"s59","method":5}`, -32600, `"s59"`},
	{`{"jsonrpc":"2.0","id":60,"method":null}`, -32600, "60"},
	{`{"jsonrpc":"2.0","id":61,"method":["ping"]}`, -32600, "61"},
	{`{"jsonrpc":"2.0","id":62,"method":"ping","params":"x"}`, -32600, "62"},
	{`{"jsonrpc":"2.0","id":63,"method":"ping","params":7}`, -32600, "63"},
	{`{"jsonrpc":"2.0","id":64,"method":"ping","params":null}`, -32600, "64"},
	{`{"jsonrpc":"2.0","id":65,"method":"ping","result":{}}`, -32600, "65"},
	{`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":1e30,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":2.0,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":99999999999999999999999,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":-9007199254740992,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":{"n":1},"method":"ping"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":[1],"method":"ping"}`, -32600, "null"},
	// Malformed notifications: no id could be read, so the answer's is null.
	{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}`, -32600, "null"},
	{`{"jsonrpc":"2.0","method":7}`, -32600, "null"},
	{`{"method":"notifications/initialized"}`, -32600, "null"},
	// Malformed responses.
	{`{"jsonrpc":"2.0","result":{}}`, -32600, "null"},
	{`{"jsonrpc":"2.0","id":66,"result":{},"error":{"code":1,"message":"x"}}`, -32600, "66"},
	{`{"jsonrpc":"2.0","id":67,"error":"bad"}`, -32600, "67"},
}

// TestMalformedLinesAreAnswered: every malformed line is answered with a
// JSON-RPC error of the right code and id, and leasectl mcp reads on: the
// valid request after them is answered, the process still runs and the
// lease it held is still held. Lines the MCP library refuses itself
// (unknown method, bad params) do not end it either; at stdin's close it
// exits 0, says why once on stderr and releases the lease.
func TestMalformedLinesAreAnswered(t *testing.T) {
	svc := startService(t)
	sdk := sdkClient(t, svc)
	name := e2e.UniqueName("mcp.malformed")
	s := startRaw(t, svc.URL, "careless")
	acq := s.call("1", "tools/call", `{"name":"lease_acquire","arguments":{"name":"`+name+`"}}`)
	if !bytes.Contains(acq["result"], []byte(`"acquired":true`)) {
		t.Fatalf("lease_acquire: %s", show(acq))
	}

	for _, tc := range malformedLines {
		s.send([]byte(tc.line))
		a := s.answer()
		if code, id, ok := errorOf(a); !ok || code != tc.code || id != tc.id {
			t.Errorf("%.100q answered %s, want error %d with id %s", tc.line, show(a), tc.code, tc.id)
		}
	}
	// Whitespace-only lines are skipped unanswered, and a response to no
	// request of the server's is dropped: the next answer is the ping's.
	s.send([]byte(""))
	s.send([]byte(" \t\r"))
	s.send([]byte(`{"jsonrpc":"2.0","id":999,"result":{}}`))
	if a := s.call("70", "ping", ""); string(a["result"]) != "{}" {
		t.Errorf("ping answered %s", show(a))
	}
	// What the MCP library refuses does not end the session either.
	for _, tc := range []struct{ method, params string }{
		{"no/such/method", `{}`},
		{"tools/call", `[]`},
		{"tools/call", `{"name":7}`},
		{"tools/call", `{"name":"no_such_tool","arguments":{}}`},
	} {
		if a := s.call("71", tc.method, tc.params); a["error"] == nil && !bytes.Contains(a["result"], []byte(`"isError":true`)) {
			t.Errorf("%s %s answered %s, want an error", tc.method, tc.params, show(a))
		}
	}

	// An oversized line is refused without buffering it.
	before := peakRSS(t, s.cmd.Process.Pid)
	big := make([]byte, 0, 30<<20+64)
	big = append(big, `{"jsonrpc":"2.0","id":72,"method":"ping","params":{"pad":"`...)
	big = append(big, bytes.Repeat([]byte("a"), 30<<20)...)
	big = append(big, `"}}`...)
	start := time.Now()
	s.send(big)
	a := s.answer()
	if code, id, ok := errorOf(a); !ok || code != -32600 || id != "null" || !bytes.Contains(a["error"], []byte("4194304")) {
		t.Errorf("a 30 MiB line answered %s, want error -32600 with id null naming the limit", show(a))
	}
	if after := peakRSS(t, s.cmd.Process.Pid); before > 0 {
		t.Logf("a 30 MiB line: refused in %v, peak RSS %d KiB → %d KiB", time.Since(start).Round(time.Millisecond), before, after)
		if after-before > 24<<10 {
			t.Errorf("peak RSS grew by %d KiB reading a 30 MiB line: it was buffered", after-before)
		}
	}

	held := s.call(`"last"`, "tools/call", `{"name":"lease_held","arguments":{}}`)
	if !bytes.Contains(held["result"], []byte(`"name":"`+name+`"`)) {
		t.Fatalf("lease_held after the malformed lines: %s", show(held))
	}
	select {
	case <-s.exited:
		t.Fatalf("leasectl mcp %s", s.state())
	default:
	}
	if l, err := sdk.Get(t.Context(), name); err != nil || !l.Held || l.Holder != "careless" {
		t.Fatalf("%s after the malformed lines: %+v, %v", name, l, err)
	}

	if err := s.wait(); err != nil {
		t.Fatalf("leasectl mcp after stdin closed: %v, want status 0; stderr:\n%s", err, s.stderr.String())
	}
	if n := strings.Count(s.stderr.String(), "stdin closed"); n != 1 {
		t.Errorf("stderr says %d times that stdin closed, want once:\n%s", n, s.stderr.String())
	}
	if l, err := sdk.Get(t.Context(), name); err != nil || l.Held {
		t.Fatalf("%s after leasectl mcp exited: %+v, %v", name, l, err)
	}
}

// TestIDsRoundTrip: a request's id comes back exactly, for strings and for
// integers up to ±(2^53−1); a fractional id, one in exponent form, or an
// integer beyond that range is refused as an invalid request rather than
// answered under another id.
func TestIDsRoundTrip(t *testing.T) {
	svc := startService(t)
	s := startRaw(t, svc.URL, "ids")
	for _, id := range []string{"0", "-1", "9007199254740991", "-9007199254740991", `""`, `"abc"`,
		`"99999999999999999999999"`, `"1.5"`, `"é 日本"`, `"9007199254740993"`} {
		if a := s.call(id, "ping", ""); string(a["result"]) != "{}" {
			t.Errorf("ping with id %s answered %s", id, show(a))
		}
	}
	for _, id := range []string{"1.5", "1e30", "1E2", "1.0", "-0", "99999999999999999999999", "9007199254740992",
		"9223372036854775807", "-9223372036854775809"} {
		s.send([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`))
		a := s.answer()
		if code, got, ok := errorOf(a); !ok || code != -32600 || got != "null" || !bytes.Contains(a["error"], []byte("id")) {
			t.Errorf("ping with id %s answered %s, want error -32600 with id null about the id", id, show(a))
		}
	}
	if err := s.wait(); err != nil {
		t.Fatalf("exit: %v; stderr:\n%s", err, s.stderr.String())
	}
}

// TestMCPEndsSayWhy: leasectl mcp says on stderr why it ends: SIGTERM
// (status 0), and a read error of stdin (status 1, not a silent 0).
func TestMCPEndsSayWhy(t *testing.T) {
	svc := startService(t)
	s := startRaw(t, svc.URL, "sigterm")
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("leasectl mcp did not exit within 20s of SIGTERM")
	}
	if s.err != nil || !strings.Contains(s.stderr.String(), "signal") {
		t.Errorf("after SIGTERM: %v, stderr:\n%s\nwant status 0 and a line naming the signal", s.err, s.stderr.String())
	}

	// A directory as stdin: every read fails with EISDIR.
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(e2e.Build(t, "./cmd/leasectl"), "mcp", "--url", svc.URL, "--holder", "eisdir", "--plain-renewals")
	cmd.Stdin, cmd.Stderr = dir, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "reading stdin") {
		t.Errorf("with a directory as stdin: %v, stderr:\n%s\nwant status 1 and a line about reading stdin", err, stderr.String())
	}
}

// peakRSS returns the peak resident set size of process pid in KiB
// (VmHWM), or 0 where /proc does not say.
func peakRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}
