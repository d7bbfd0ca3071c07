package scenario

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
)

// proxy is a TCP proxy in front of the service that a test can cut: while
// cut, it accepts connections and forwards nothing (a black hole: requests
// time out, as across a network partition), and the connections it was
// forwarding stop dead.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newProxy starts a proxy to target (host:port); it stops when the test
// ends.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's base URL.
func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue // held open, never answered, closed on restore
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

func (p *proxy) forward(c net.Conn) {
	up, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() })
	wg.Go(func() {
		_, _ = io.Copy(c, up)
		if !p.isCut() { // a cut leaves the client waiting, with no EOF
			_ = c.(*net.TCPConn).CloseWrite()
		}
	})
	wg.Wait()
	p.drop(up)
	if !p.isCut() {
		p.drop(c)
	}
}

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Cut makes the service unreachable through the proxy: upstream
// connections are closed and nothing reaches the client any more, so
// requests in flight and new ones hang until the client gives up.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok && tc.LocalAddr().String() != p.ln.Addr().String() {
			_ = c.Close() // an upstream connection: the client side stays open and silent
		}
	}
}

// Restore forwards again; connections held while cut are closed.
func (p *proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *proxy) close() {
	_ = p.ln.Close()
	p.Restore()
	p.wg.Wait()
}
