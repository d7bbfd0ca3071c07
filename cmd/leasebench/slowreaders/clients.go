package main

import (
	"bufio"
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

// seed stores n leases "slow.00000"… of 16 KiB of metadata and of
// checkpoint each, 16 at a time, as principal 0.
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
	if _, err := post(base+"/v1/leases/"+name+":acquire", tokenOf(0), `{"holder":"h","ttlMs":3600000,"metadata":`+blob+`}`, &l); err != nil {
		return err
	}
	_, err := post(base+"/v1/leases/"+name+":renew", tokenOf(0), fmt.Sprintf(`{"holder":"h","fencingToken":%d,"checkpoint":%s}`, l.FencingToken, blob), nil)
	return err
}

// post sends a JSON body with token; a status other than 200 is an
// error, which says the status.
func post(url, token, body string, out any) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("POST %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("POST %s = %d %.200s", url, resp.StatusCode, raw)
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

// churn acquires and releases the leases "slow.churn.000"… of n, with the
// blob as metadata, as principal 0, from 4 goroutines until ctx ends: each
// turn is two changes of holding that every prefix stream and the watch
// of that lease carry. It returns how many turns it made.
func churn(ctx context.Context, base string, n int, stderr io.Writer) int {
	var mu sync.Mutex
	turns := 0
	var once sync.Once
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; ctx.Err() == nil; i += 4 {
				name := fmt.Sprintf("slow.churn.%03d", i%n)
				var l struct {
					FencingToken int64 `json:"fencingToken"`
				}
				if _, err := post(base+"/v1/leases/"+name+":acquire", tokenOf(0), `{"holder":"c","ttlMs":60000,"metadata":`+blob+`}`, &l); err != nil {
					if ctx.Err() == nil {
						once.Do(func() { fmt.Fprintln(stderr, "churn:", err) })
					}
					continue
				}
				_, _ = post(base+"/v1/leases/"+name+":release", tokenOf(0), fmt.Sprintf(`{"holder":"c","fencingToken":%d}`, l.FencingToken), nil)
				mu.Lock()
				turns++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return turns
}

// stalled sends a GET of path with token on a connection with a 4 KiB
// receive buffer and reads nothing.
func stalled(addr, path, token string) (net.Conn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", path, addr, token); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// status reads the status code of the answer on a stalled connection:
// its first line is in the connection's receive buffer, read or not. 0
// when none came.
func status(conn net.Conn) int { return statusWithin(conn, 500*time.Millisecond) }

// statusWithin is status, waiting up to d for the answer.
func statusWithin(conn net.Conn, d time.Duration) int {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = conn.SetReadDeadline(time.Time{}) }()
	line, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
	if err != nil && line == "" {
		return 0
	}
	var code int
	if _, err := fmt.Sscanf(line, "HTTP/1.1 %d", &code); err != nil {
		return 0
	}
	return code
}

// established counts the connections of conns that the instance at addr
// still holds open, from /proc/net/tcp: its end of each (the socket on
// its port whose remote port is the connection's local one) in state
// ESTABLISHED. Reading
// the connections instead would take long through their small windows.
func established(addr string, conns []net.Conn) (int, error) {
	hexAddr := func(a *net.TCPAddr) string { // as /proc/net/tcp shows an IPv4 address
		ip := a.IP.To4()
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil || ta.IP.To4() == nil {
		return 0, fmt.Errorf("instance address %q: want IPv4", addr)
	}
	local := hexAddr(ta)
	mine := map[string]bool{}
	for _, c := range conns {
		mine[hexAddr(c.LocalAddr().(*net.TCPAddr))] = true
	}
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, fmt.Errorf("read /proc/net/tcp (Linux only): %w", err)
	}
	// A read of /proc/net/tcp can show a socket twice while the table
	// changes: each connection counts once.
	seen := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		if f[1] == local && mine[f[2]] && f[3] == "01" {
			seen[f[2]] = true
		}
	}
	return len(seen), nil
}

// legit opens a prefix stream of every lease as principal `who` and reads
// it to its `: live` mark: how many snapshots it got, and the status or
// error that stopped it early ("" when it went live).
func legit(ctx context.Context, base, token string) (snapshots int, failure string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/leases:watch?prefix=slow.", nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, resp.Status
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "event: snapshot":
			snapshots++
		case line == ": live":
			return snapshots, ""
		case line == "event: overflow":
			return snapshots, "overflow"
		}
	}
	if err := sc.Err(); err != nil {
		return snapshots, err.Error()
	}
	return snapshots, "ended before live"
}
