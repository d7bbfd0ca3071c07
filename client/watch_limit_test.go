package client_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leasesvc/leasesvc/client"
)

// countingTransport counts the bytes the client reads of answer bodies.
type countingTransport struct {
	next http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestStreamEventTooLarge: a stream event larger than MaxAnswerBytes, as
// one data line or as many, ends the Stream with an error naming the
// bound once about that many bytes are read (issue 37: a 400 MiB line
// grew leasectl watch to 1.7 GB). The fake service sends a valid event of
// twice the bound, so a reader without the bound returns it.
func TestStreamEventTooLarge(t *testing.T) {
	const head = `{"type":"acquired","lease":{"name":"x","holder":"h","fencingToken":1,"held":true,"metadata":{"b":"`
	const tail = `"}},"eventTime":"2026-11-23T18:00:00Z"}`
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for _, tc := range []struct {
		name  string
		lines int // data lines the event is cut into
		size  int // bytes of metadata in all
	}{
		{"one line", 1, 2 * client.MaxAnswerBytes},
		{"many lines", 17, client.MaxAnswerBytes + 4<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				if _, err := io.WriteString(w, ": hello\n\nid: 1\nevent: acquired\ndata: "+head); err != nil {
					return
				}
				per := tc.size / tc.lines
				for i := range tc.lines {
					if i > 0 {
						if _, err := io.WriteString(w, "\ndata: "); err != nil {
							return
						}
					}
					for left := per; left > 0; left -= len(chunk) {
						if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
							return
						}
					}
				}
				_, _ = io.WriteString(w, tail+"\n\n")
			}))
			defer srv.Close()
			tr := &countingTransport{next: http.DefaultTransport.(*http.Transport).Clone()}
			c, err := client.New(srv.URL, client.Config{MaxAttempts: 1, HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.Watch(t.Context(), "x")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ev, err := s.Next()
			want := "event larger than " + strconv.Itoa(client.MaxAnswerBytes) + " bytes"
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, client.ErrInternal) {
				t.Fatalf("Next = %v event, %v; want ErrInternal saying %q", ev.Type, err, want)
			}
			if _, err2 := s.Next(); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Next after the failure = %v, want the same failure", err2)
			}
			// The client reads ahead at most what the transport buffers
			// (a few KiB) and one chunk the server wrote.
			if n := tr.read.Load(); n > client.MaxAnswerBytes+2<<20 {
				t.Errorf("read %d bytes of the stream, want at most the bound %d and 2 MiB", n, client.MaxAnswerBytes)
			}
		})
	}
}
