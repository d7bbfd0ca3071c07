package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// blob is 16 KiB of metadata (and of checkpoint), the most the service
// takes, of characters that an HTML-escaping encoder writes as \u003c,
// \u0026 and \u003e.
var blob = `{"blob":"` + strings.Repeat("<&>", (16<<10-12)/3) + `"}`

// measure runs one binary through the scenario.
func measure(ctx context.Context, c config, bin string, stderr io.Writer) (result, error) {
	r := result{binary: bin, connections: c.readers + c.streams}
	in, err := start(ctx, bin, stderr)
	if err != nil {
		return r, err
	}
	defer in.stop()
	if err := seed(ctx, in.base, c.leases); err != nil {
		return r, err
	}
	if r.base, err = in.rss(); err != nil {
		return r, err
	}
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			_ = conn.Close()
		}
	}()
	for i := range c.readers + c.streams {
		path := fmt.Sprintf("/v1/leases?pageSize=%d", c.pageSize)
		if i >= c.readers {
			path = "/v1/leases:watch"
		}
		conn, err := stalled(in.addr, path)
		if err != nil {
			return r, err
		}
		conns = append(conns, conn)
	}
	r.peak = r.base
	end := time.Now().Add(c.window)
	for time.Now().Before(end) {
		m, err := in.rss()
		if err != nil {
			return r, err
		}
		r.peak, r.end = max(r.peak, m), m
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	open, err := established(conns)
	if err != nil {
		return r, err
	}
	r.closed = len(conns) - open
	// After the window: the old binaries hold a whole page in memory.
	r.firstPageLeases, r.firstPageBytes, err = firstPage(in.base, c.pageSize)
	return r, err
}

// seed stores n leases "slow.00000"… of 16 KiB of metadata and of
// checkpoint each, 16 at a time.
func seed(ctx context.Context, base string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := store(base, fmt.Sprintf("slow.%05d", i)); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case next <- i:
		case err = <-errs:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	close(next)
	wg.Wait()
	select {
	case e := <-errs:
		err = errors.Join(err, e)
	default:
	}
	return err
}

// store acquires name with the blob as metadata and renews it with the
// blob as checkpoint.
func store(base, name string) error {
	var l struct {
		FencingToken int64 `json:"fencingToken"`
	}
	if err := post(base+"/v1/leases/"+name+":acquire", `{"holder":"h","ttlMs":3600000,"metadata":`+blob+`}`, &l); err != nil {
		return err
	}
	return post(base+"/v1/leases/"+name+":renew", fmt.Sprintf(`{"holder":"h","fencingToken":%d,"checkpoint":%s}`, l.FencingToken, blob), nil)
}

func post(url, body string, out any) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s = %d %.200s", url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// firstPage reads the first list page whole: how many leases it holds and
// its encoded size.
func firstPage(base string, size int) (leases, bytes int, err error) {
	resp, err := http.Get(fmt.Sprintf("%s/v1/leases?pageSize=%d", base, size))
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("list: %w", err)
	}
	var page struct {
		Leases []json.RawMessage `json:"leases"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return 0, 0, fmt.Errorf("list: %w", err)
	}
	return len(page.Leases), len(raw), nil
}

// stalled sends a GET of path on a connection with a 4 KiB receive buffer
// and reads nothing.
func stalled(addr, path string) (net.Conn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// established counts the connections of conns that the instance still
// holds open, from /proc/net/tcp: its end of each (the socket whose
// remote port is the connection's local one) in state ESTABLISHED. Reading
// the connections instead would take long through their small windows.
func established(conns []net.Conn) (int, error) {
	mine := map[string]bool{}
	for _, c := range conns {
		mine[fmt.Sprintf("%04X", c.LocalAddr().(*net.TCPAddr).Port)] = true
	}
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, fmt.Errorf("read /proc/net/tcp (Linux only): %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		_, remotePort, _ := strings.Cut(f[2], ":")
		if mine[remotePort] && f[3] == "01" {
			n++
		}
	}
	return n, nil
}
