package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// subprotocol is the sessions' WebSocket subprotocol.
const subprotocol = "leasesvc.session.v2"

// upgrade sends a session upgrade request as principal p over a new
// connection and returns the connection when it was upgraded (101), and
// the status either way.
func upgrade(ctx context.Context, addr string, p int) (net.Conn, int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	req := "GET /v1/sessions:connect HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: " + subprotocol + "\r\n" +
		"Authorization: Bearer " + tokenOf(p) + "\r\n\r\n"
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte(req)); err != nil {
		conn.Close()
		return nil, 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		conn.Close()
		return nil, resp.StatusCode, nil
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, resp.StatusCode, nil
}

// unopened upgrades b.c.sockets sockets that send nothing, and waits up to
// the header timeout and 5 s more for the instance to close them.
func unopened(ctx context.Context, b *bench, bin string) ([]row, error) {
	in, err := start(ctx, bin, b.tokens, b.policy, []string{"LEASESVC_RATE_LIMIT=0"}, b.stderr)
	if err != nil {
		return nil, err
	}
	defer in.stop()
	time.Sleep(time.Second) // settle before the baseline
	base, err := in.rss()
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	result := in.sample(stop)
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		conns    []net.Conn
		lastUp   time.Time
		wg       sync.WaitGroup
		told     atomic.Int64 // sent the close within the header timeout + 1 s
		ended    atomic.Int64 // connection closed by the instance within the header timeout + 6 s
		gone     atomic.Int64 // connection closed by the instance at all
		sem      = make(chan struct{}, 64)
	)
	for i := range b.c.sockets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, status, err := upgrade(ctx, in.addr, i%b.c.principals)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				statuses[-1]++
				return
			}
			statuses[status]++
			if conn == nil {
				return
			}
			up := time.Now()
			conns, lastUp = append(conns, conn), up
			go func() {
				buf := make([]byte, 4096)
				if _, err := conn.Read(buf); err == nil && time.Since(up) <= b.c.headerTimeout+time.Second {
					told.Add(1) // the error message and the close frame
				}
				for {
					if _, err := conn.Read(buf); err != nil {
						break
					}
				}
				gone.Add(1)
				if time.Since(up) <= b.c.headerTimeout+6*time.Second {
					ended.Add(1)
				}
			}()
		}()
	}
	wg.Wait()
	upgraded := len(conns)
	deadline := lastUp.Add(b.c.headerTimeout + 6*time.Second)
	for time.Now().Before(deadline) && gone.Load() < int64(upgraded) {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	peak, last := result()
	nTold, nEnded := told.Load(), ended.Load()
	for _, c := range conns {
		_ = c.Close()
	}
	var refused []string
	for st, n := range statuses {
		if st != http.StatusSwitchingProtocols {
			refused = append(refused, fmt.Sprintf("%d×%d", n, st))
		}
	}
	mix := fmt.Sprintf("unopened %d sockets, %d principals", b.c.sockets, b.c.principals)
	return []row{
		{bin, mix, "upgraded / refused (count×status)", fmt.Sprintf("%d / %s", upgraded, strings.Join(refused, ", "))},
		{bin, mix, "RSS before, growth at peak (MiB)", fmt.Sprintf("%.0f, %+.0f", base, peak-base)},
		{bin, mix, "growth at the end (MiB)", fmt.Sprintf("%+.0f", last-base)},
		{bin, mix, fmt.Sprintf("told (error, close frame) within %v + 1 s / connection closed within %v + 6 s", b.c.headerTimeout, b.c.headerTimeout),
			fmt.Sprintf("%d / %d of %d", nTold, nEnded, upgraded)},
	}, nil
}

// blob is 16 KiB of metadata (and of checkpoint), the most the service
// takes.
var blob = `{"blob":"` + strings.Repeat("x", 16<<10-12) + `"}`

// seedBig makes lease "big" held by principal 0 with 16 KiB of metadata
// and of checkpoint: a lease_held error about it carries 33 KB.
func seedBig(ctx context.Context, base string) error {
	post := func(path, body string) (map[string]any, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header = authHeader(0)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			return nil, fmt.Errorf("%s: %d %v %v", path, resp.StatusCode, m, err)
		}
		return m, nil
	}
	l, err := post("/v1/leases/big:acquire", `{"holder":"owner","ttlMs":3600000,"metadata":`+blob+`}`)
	if err != nil {
		return err
	}
	_, err = post("/v1/leases/big:renew", fmt.Sprintf(`{"holder":"owner","ttlMs":3600000,"fencingToken":%v,"metadata":%s,"checkpoint":%s}`, l["fencingToken"], blob, blob))
	return err
}

// openSocket dials a session socket as principal p and opens a session.
func openSocket(ctx context.Context, base string, p int) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, strings.Replace(base, "http", "ws", 1)+"/v1/sessions:connect",
		&websocket.DialOptions{HTTPHeader: authHeader(p), Subprotocols: []string{subprotocol}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"open","id":1}`)); err != nil {
		return nil, err
	}
	_, data, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(data), `"opened"`) {
		_ = c.CloseNow()
		return nil, fmt.Errorf("open: %s", data)
	}
	return c, nil
}

// nonReading runs, for each count, that many sockets of principal 0 that
// stop reading and ask for 33 KB answers.
func nonReading(ctx context.Context, b *bench, bin string) ([]row, error) {
	var rows []row
	for _, n := range b.c.nonreading {
		r, err := nonReadingRun(ctx, b, bin, n)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func nonReadingRun(ctx context.Context, b *bench, bin string, n int) ([]row, error) {
	in, err := start(ctx, bin, b.tokens, b.policy, []string{"LEASESVC_RATE_LIMIT=0"}, b.stderr)
	if err != nil {
		return nil, err
	}
	defer in.stop()
	if err := seedBig(ctx, in.base); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	base, err := in.rss()
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	result := in.sample(stop)
	var wg sync.WaitGroup
	end := time.Now().Add(b.c.duration)
	conns := make([]*websocket.Conn, n)
	for i := range n {
		c, err := openSocket(ctx, in.base, 0)
		if err != nil {
			close(stop)
			result()
			return nil, fmt.Errorf("socket %d: %w", i, err)
		}
		defer c.CloseNow()
		conns[i] = c
		wg.Add(1)
		go func() { // from here nothing is read until the end
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(b.c.rate))
			defer tick.Stop()
			for id := 2; time.Now().Before(end); id++ {
				<-tick.C
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := c.Write(wctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"acquire","id":%d,"name":"big","holder":"h%d"}`, id, i))
				cancel()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second)
	close(stop)
	peak, last := result()
	// Now read what each socket was sent, up to 15 s: a socket the
	// instance closed ends with its close status.
	codes := map[string]int{}
	var mu sync.Mutex
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			c.SetReadLimit(1 << 20)
			for {
				if _, _, err := c.Read(rctx); err != nil {
					key := "open"
					if st := websocket.CloseStatus(err); st != -1 {
						key = strconv.Itoa(int(st))
					} else if rctx.Err() == nil {
						key = "dropped"
					}
					mu.Lock()
					codes[key]++
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	var closes []string
	for k, v := range codes {
		closes = append(closes, fmt.Sprintf("%d×%s", v, k))
	}
	mix := fmt.Sprintf("nonreading %d sockets × %d/s of 33 KB answers, %v", n, b.c.rate, b.c.duration)
	return []row{
		{bin, mix, "RSS before, growth at peak (MiB)", fmt.Sprintf("%.0f, %+.0f", base, peak-base)},
		{bin, mix, "growth at the end (MiB)", fmt.Sprintf("%+.0f", last-base)},
		{bin, mix, "sockets by how they ended (close code, dropped, or still open 15 s later)", strings.Join(closes, ", ")},
	}, nil
}
