package leasemcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/leasesvc/leasesvc/client"
)

// filler reads as n bytes of 'a' and then rest, allocating nothing.
type filler struct {
	n    int64
	rest *strings.Reader
}

func (f *filler) Read(p []byte) (int, error) {
	if f.n == 0 {
		return f.rest.Read(p)
	}
	k := min(int64(len(p)), f.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	f.n -= k
	return int(k), nil
}

// TestReadLineBounded: a line longer than the limit is skipped to its
// newline without being buffered (30 MiB read, well under 4 MiB
// allocated), and the lines around it are read whole.
func TestReadLineBounded(t *testing.T) {
	const limit = 1 << 20
	in := &filler{n: 30 << 20, rest: strings.NewReader("tail\nok\r\n\n" + strings.Repeat("b", limit) + "\nlast")}
	br := bufio.NewReaderSize(io.MultiReader(strings.NewReader("first\n"), in), 64<<10)
	line, size, err := readLine(br, nil, limit)
	if string(line) != "first" || size != 5 || err != nil {
		t.Fatalf("first line: %q %d %v", line, size, err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	line, size, err = readLine(br, line[:0], limit)
	runtime.ReadMemStats(&after)
	if line != nil || size != 30<<20+4 || err != nil {
		t.Fatalf("the long line: %d bytes returned, size %d, %v; want none, size %d", len(line), size, err, 30<<20+4)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("reading past a 30 MiB line allocated %d bytes", got)
	}
	t.Logf("a 30 MiB line skipped with %d KiB allocated (limit %d KiB)", (after.TotalAlloc-before.TotalAlloc)>>10, limit>>10)
	for _, want := range []string{"ok", "", strings.Repeat("b", limit)} {
		if line, size, err = readLine(br, nil, limit); string(line) != want || size != int64(len(want)) || err != nil {
			t.Fatalf("after the long line: %.20q (%d bytes) %v, want %.20q", line, size, err, want)
		}
	}
	if line, _, err = readLine(br, nil, limit); string(line) != "last" || !errors.Is(err, io.EOF) {
		t.Fatalf("a last line without its newline: %q %v", line, err)
	}
	if line, size, err = readLine(br, nil, limit); len(line) != 0 || size != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %q %d %v", line, size, err)
	}
	// The limit is of the line without its "\r\n": limit+1 bytes is over.
	br = bufio.NewReader(strings.NewReader(strings.Repeat("c", limit+1) + "\r\nnext\n"))
	if line, size, err = readLine(br, nil, limit); line != nil || size != limit+1 || err != nil {
		t.Fatalf("a line of limit+1 bytes: %d bytes, size %d, %v", len(line), size, err)
	}
	if line, _, _ = readLine(br, nil, limit); string(line) != "next" {
		t.Fatalf("after it: %q", line)
	}
}

// TestDecodeLine: what passes on to the MCP library keeps its id, method
// and params exactly; member names are matched exactly; whitespace
// inside the object is fine.
func TestDecodeLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // the message as the library would write it
	}{
		{`{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`, `{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`},
		{`{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping","params":{}}`, `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping","params":{}}`},
		{` { "method" : "x" , "params" : [1, 2] , "jsonrpc" : "2.0" , "id" : "é" } `, `{"jsonrpc":"2.0","id":"é","method":"x","params":[1,2]}`},
		{`{"jsonrpc":"2.0","method":"notifications/initialized","ID":5}`, `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{`{"jsonrpc":"2.0","id":3,"result":{"ok":true}}`, `{"jsonrpc":"2.0","id":3,"result":{"ok":true}}`},
		{`{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"no"}}`, `{"jsonrpc":"2.0","id":"r","error":{"code":-1,"message":"no"}}`},
	} {
		msg, r := decodeLine([]byte(tc.line))
		if r != nil {
			t.Errorf("%s refused: %s", tc.line, r.encode())
			continue
		}
		if b, err := jsonrpc.EncodeMessage(msg); err != nil || string(b) != tc.want {
			t.Errorf("%s passed on as %s (%v), want %s", tc.line, b, err, tc.want)
		}
	}
	// An empty method is a method (not found, answers the library).
	if msg, r := decodeLine([]byte(`{"jsonrpc":"2.0","id":"","method":""}`)); r != nil || msg.(*jsonrpc.Request).Method != "" ||
		msg.(*jsonrpc.Request).ID.Raw() != "" {
		t.Errorf(`method "", id "": %#v, %+v`, msg, r)
	}
	for _, line := range []string{`{"jsonrpc":"2.0","Method":"ping","id":1}`, `{"JSONRPC":"2.0","method":"ping","id":1}`,
		`{"jsonrpc":"2.0","id":3,"error":{"message":"no code"}}`, `{"jsonrpc":"2.0","id":3,"error":{"code":1.5,"message":"x"}}`} {
		if _, r := decodeLine([]byte(line)); r == nil || r.code != jsonrpc.CodeInvalidRequest {
			t.Errorf("%s: %+v, want an invalid request", line, r)
		}
	}
}

// script is an MCP client's stdin: lines, then the end err (io.EOF for a
// close).
type script struct {
	r   io.Reader
	err error
}

func (s *script) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if errors.Is(err, io.EOF) {
		err = s.err
	}
	return n, err
}

// failingWriter fails every write after the first ok ones.
type failingWriter struct {
	ok  int
	buf bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.ok == 0 {
		return 0, syscall.EPIPE
	}
	w.ok--
	return w.buf.Write(p)
}

// TestRunEnds: Server.Run over a LineTransport returns nil at EOF, after
// the refusals of the lines before it; and the cause when stdin fails to
// read or stdout to write.
func TestRunEnds(t *testing.T) {
	c, err := client.New("http://127.0.0.1:1", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	run := func(in io.Reader, out io.Writer) error {
		t.Helper()
		srv, err := New(c, Config{Holder: "ends"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return srv.Run(ctx, &LineTransport{In: in, Out: out, MaxLine: 64})
	}
	var out bytes.Buffer
	lines := "garbage\n" + strings.Repeat("x", 100) + "\n{}"
	if err := run(&script{strings.NewReader(lines), io.EOF}, &out); err != nil {
		t.Fatalf("at EOF: %v", err)
	}
	var codes []int64
	for line := range strings.Lines(out.String()) {
		var a struct {
			ID    json.RawMessage
			Error jsonrpc.Error
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil || string(a.ID) != "null" {
			t.Fatalf("answer %q: %v", line, err)
		}
		codes = append(codes, a.Error.Code)
	}
	if want := []int64{-32700, -32600, -32600}; !slices.Equal(codes, want) {
		t.Fatalf("answers %v, want %v:\n%s", codes, want, out.String())
	}

	broken := errors.New("the disk fell off")
	if err := run(&script{strings.NewReader("garbage\n"), broken}, io.Discard); !errors.Is(err, broken) || !strings.Contains(err.Error(), "reading stdin") {
		t.Fatalf("after a read error: %v, want it, reading stdin", err)
	}
	// The refusal of the second line cannot be written: the session ends.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("garbage\ngarbage\n")) }()
	if err := run(pr, &failingWriter{ok: 1}); !errors.Is(err, syscall.EPIPE) || !strings.Contains(err.Error(), "writing stdout") {
		t.Fatalf("after a write error: %v, want EPIPE, writing stdout", err)
	}
	// The answer to a ping cannot be written: the session ends, though
	// stdin stays open.
	pr, pw = io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n")) }()
	if err := run(pr, &failingWriter{}); !errors.Is(err, syscall.EPIPE) || !strings.Contains(err.Error(), "writing stdout") {
		t.Fatalf("after a write error of the library's: %v, want EPIPE, writing stdout", err)
	}
}
