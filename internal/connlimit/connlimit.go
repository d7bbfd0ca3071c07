// Package connlimit bounds the connections an instance holds, in all and
// per client address, before any HTTP work is done on them
// (docs/contract.md §16): a connection past a limit is answered a short
// 503 problem+json and closed, so that neither a flood of connections nor
// one address's share of them can hold the instance's memory in their
// buffers and half-read headers.
package connlimit

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Config are the limits. Zero turns a limit off.
type Config struct {
	// Total caps the connections open at once.
	Total int
	// PerAddress caps the connections open at once from one remote IP
	// address. Off behind a front end whose address every connection
	// carries (Cloud Run), where the caller is the principal instead.
	PerAddress int
	// OnRefuse, when set, is called with the remote address and which
	// limit ("instance" or "address") refused a connection.
	OnRefuse func(addr, limit string)
}

// Listener is a net.Listener whose Accept holds back connections past its
// limits.
type Listener struct {
	net.Listener
	cfg Config

	mu     sync.Mutex
	open   int
	byAddr map[string]int
}

// New wraps ln with the limits of cfg.
func New(ln net.Listener, cfg Config) *Listener {
	return &Listener{Listener: ln, cfg: cfg, byAddr: map[string]int{}}
}

// refusal is what a connection past a limit reads before it is closed.
const refusal = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\n" +
	"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"

// refuseWrite bounds the write of the refusal: a client that does not
// read gets nothing rather than holding the accept loop.
const refuseWrite = 100 * time.Millisecond

// Accept returns the next connection within the limits; the others are
// refused and closed as they come.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		limit := l.take(addr)
		if limit == "" {
			return &conn{Conn: c, l: l, addr: addr}, nil
		}
		if l.cfg.OnRefuse != nil {
			l.cfg.OnRefuse(addr, limit)
		}
		go refuse(c, limit)
	}
}

// refuse answers c 503 and closes it.
func refuse(c net.Conn, limit string) {
	body := fmt.Sprintf(`{"type":"urn:leasesvc:problem:unavailable","title":"Service Unavailable","status":503,"code":"unavailable","detail":"too many connections open on this %s (LEASESVC_MAX_CONNECTIONS%s); retry"}`,
		map[string]string{"instance": "instance", "address": "instance from this client address"}[limit],
		map[string]string{"instance": "", "address": "_PER_ADDRESS"}[limit])
	_ = c.SetWriteDeadline(time.Now().Add(refuseWrite))
	_, _ = fmt.Fprintf(c, refusal, len(body), body)
	_ = c.Close()
}

// take counts a connection from addr, or returns the limit it is past.
func (l *Listener) take(addr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.cfg.Total > 0 && l.open >= l.cfg.Total:
		return "instance"
	case l.cfg.PerAddress > 0 && l.byAddr[addr] >= l.cfg.PerAddress:
		return "address"
	}
	l.open++
	if l.cfg.PerAddress > 0 {
		l.byAddr[addr]++
	}
	return ""
}

// give uncounts a connection from addr.
func (l *Listener) give(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.cfg.PerAddress > 0 {
		if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
			delete(l.byAddr, addr)
		}
	}
}

// Open returns the connections open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// hostOf is the IP address of a remote address.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn gives its count back once, when closed.
type conn struct {
	net.Conn
	l    *Listener
	addr string
	once sync.Once
}

// Close closes the connection and gives its count back.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.give(c.addr) })
	return err
}
