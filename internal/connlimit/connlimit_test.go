package connlimit_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/connlimit"
)

// serve starts an HTTP server answering 204 behind the limits of cfg.
func serve(t *testing.T, cfg connlimit.Config) (*connlimit.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, cfg)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l, ln.Addr().String()
}

// request sends one keep-alive request on c and returns its status.
func request(t *testing.T, c net.Conn, br *bufio.Reader) int {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// TestInstanceLimit: past Total open connections the next is answered
// 503 problem+json and closed before any HTTP work; a closed connection
// frees its place.
func TestInstanceLimit(t *testing.T) {
	refused := make(chan string, 8)
	l, addr := serve(t, connlimit.Config{Total: 2, OnRefuse: func(_, limit string) { refused <- limit }})
	a, abr := dial(t, addr)
	b, bbr := dial(t, addr)
	if request(t, a, abr) != 204 || request(t, b, bbr) != 204 {
		t.Fatal("the first two connections were not served")
	}
	c, cbr := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(cbr, nil) // the refusal comes before any request
	if err != nil {
		t.Fatalf("the third connection read no refusal: %v", err)
	}
	var body strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&body)
	if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(body.String(), "LEASESVC_MAX_CONNECTIONS") {
		t.Fatalf("refusal %d %v %s", resp.StatusCode, resp.Header, body.String())
	}
	if got := <-refused; got != "instance" {
		t.Fatalf("refused by %q; want instance", got)
	}
	_ = a.Close()
	deadline := time.Now().Add(10 * time.Second)
	for l.Open() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections counted after one closed; want 1", l.Open())
		}
		time.Sleep(time.Millisecond)
	}
	d, dbr := dial(t, addr)
	if st := request(t, d, dbr); st != 204 {
		t.Fatalf("a connection after one closed: %d; want 204", st)
	}
}

// TestAddressLimit: one address holds at most PerAddress connections,
// whatever the instance's total allows.
func TestAddressLimit(t *testing.T) {
	refused := make(chan string, 8)
	_, addr := serve(t, connlimit.Config{Total: 100, PerAddress: 1, OnRefuse: func(_, limit string) { refused <- limit }})
	a, abr := dial(t, addr)
	if request(t, a, abr) != 204 {
		t.Fatal("the first connection was not served")
	}
	b, bbr := dial(t, addr)
	if st := request(t, b, bbr); st != 503 && st != 0 {
		t.Fatalf("a second connection from the address: %d; want 503", st)
	}
	if got := <-refused; got != "address" {
		t.Fatalf("refused by %q; want address", got)
	}
}
