package sockmix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestAppendFrameHeader: each length takes the shortest of its three
// forms, and the mask bit and key follow.
func TestAppendFrameHeader(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	for _, tc := range []struct {
		n    uint64
		want []byte
	}{
		{0, []byte{0x81, 0x80}},
		{125, []byte{0x81, 0x80 | 125}},
		{126, []byte{0x81, 0x80 | 126, 0, 126}},
		{0xFFFF, []byte{0x81, 0x80 | 126, 0xFF, 0xFF}},
		{1 << 20, []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0x10, 0, 0}},
	} {
		got := AppendFrameHeader(nil, true, OpText, tc.n, key)
		if want := append(tc.want, key[:]...); !bytes.Equal(got, want) {
			t.Errorf("n=%d: header % x, want % x", tc.n, got, want)
		}
	}
	if got := AppendFrameHeader(nil, false, OpContinuation, 5, key)[0]; got != 0x00 {
		t.Errorf("no FIN, continuation: first byte %#x, want 0", got)
	}
}

// TestMaskAcrossWrites: a MaskWriter fed in pieces of any length masks as
// one pass over the whole payload would, and leaves the caller's bytes
// alone.
func TestMaskAcrossWrites(t *testing.T) {
	key := [4]byte{0xA1, 0xB2, 0xC3, 0xD4}
	payload := []byte(strings.Repeat("the quick brown fox ", 500))
	orig := bytes.Clone(payload)
	want := make([]byte, len(payload))
	for i := range payload {
		want[i] = payload[i] ^ key[i%4]
	}
	var out bytes.Buffer
	mw := NewMaskWriter(&out, key, 100) // chunks of 100 inside pieces of 7, 1, 13…
	for rest, step := payload, 1; len(rest) > 0; step = step*3%17 + 1 {
		n := min(step, len(rest))
		if _, err := mw.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatal("masked in pieces differs from masked at once")
	}
	if !bytes.Equal(payload, orig) {
		t.Fatal("the caller's bytes were changed")
	}
}

// TestPartialFrame: the header declares the whole length, and only the
// parts follow, masked.
func TestPartialFrame(t *testing.T) {
	var out bytes.Buffer
	sent := []byte(strings.Repeat("x", 20_000))
	if err := WritePartialFrame(&out, OpText, 1<<20, sent[:5], sent[5:]); err != nil {
		t.Fatal(err)
	}
	b := out.Bytes()
	if b[0] != 0x81 || b[1] != 0x80|127 || binary.BigEndian.Uint64(b[2:10]) != 1<<20 {
		t.Fatalf("header % x, want a text frame declaring 1 MiB, masked", b[:10])
	}
	var key [4]byte
	copy(key[:], b[10:14])
	body := b[14:]
	if len(body) != len(sent) {
		t.Fatalf("%d payload bytes written, want %d", len(body), len(sent))
	}
	Mask(body, body, key, 0)
	if !bytes.Equal(body, sent) {
		t.Fatal("payload does not unmask to what was sent")
	}
	_, _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), 2<<20)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("reading the partial frame: %v, want unexpected EOF", err)
	}
	if err := WritePartialFrame(io.Discard, OpText, 3, []byte("four")); err == nil {
		t.Fatal("more payload than declared was written")
	}
}

// TestFramesReachAWebSocketLibrary: text frames written by hand, small and
// large, in parts, are read whole by coder/websocket's server, which
// checks the masking; its answers and its close are read back.
func TestFramesReachAWebSocketLibrary(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}})
		if err != nil {
			return
		}
		c.SetReadLimit(2 << 20)
		for range 2 {
			_, data, err := c.Read(r.Context())
			if err != nil {
				got <- "error: " + err.Error()
				return
			}
			got <- string(data)
			_ = c.Write(r.Context(), websocket.MessageText, []byte(`{"type":"error","re":7,"problem":{"status":429,"code":"resource_exhausted"}}`))
		}
		_ = c.Close(websocket.StatusMessageTooBig, "too big")
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, st, err := DialRaw(ctx, strings.TrimPrefix(srv.URL, "http://"), "t")
	if err != nil || st != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d %v", st, err)
	}
	defer s.Close()
	big := strings.Repeat(" ", 300_000)
	if err := s.WriteText([]byte(`{"a":`), []byte(big), []byte(`1}`)); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != `{"a":`+big+`1}` {
		t.Fatalf("large message read as %d bytes %.40q…", len(m), m)
	}
	if err := s.Request(time.Second, func(id int64) [][]byte { return [][]byte{[]byte(`{"id":`), []byte{byte('0' + id)}, []byte(`}`)} }); err != nil {
		t.Fatal(err)
	}
	if m := <-got; m != `{"id":1}` {
		t.Fatalf("small message read as %q", m)
	}
	var keys []string
	end := s.Watch(func(m Message) { keys = append(keys, m.Key()) })
	if end != "1009" || len(keys) != 2 || keys[0] != "error 429 resource_exhausted" {
		t.Fatalf("watched %v, ended %q; want two 429 errors, then 1009", keys, end)
	}
}

// TestWatchDropped: a connection that ends without a close frame is
// "dropped".
func TestWatchDropped(t *testing.T) {
	a, b := net.Pipe()
	s := &RawSocket{conn: a, br: bufio.NewReader(a)}
	go func() {
		_, _ = b.Write([]byte{0x81, 2, '{', '}'})
		_ = b.Close()
	}()
	if end := s.Watch(nil); end != "dropped" {
		t.Fatalf("ended %q, want dropped", end)
	}
}
