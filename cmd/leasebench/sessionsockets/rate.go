package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/sockmix"
	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// rateMix measures the acquires one principal is served per second over
// b.c.rateSockets session sockets, then over as many REST callers, at the
// default rate limit.
func rateMix(ctx context.Context, b *bench, bin string) ([]row, error) {
	in, err := start(ctx, b, bin, nil)
	if err != nil {
		return nil, err
	}
	defer in.Stop()
	var served, limited, other atomic.Int64
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, b.c.rateSockets)
	for i := range conns { // every socket opens before any acquires
		c, err := sockmix.OpenSocket(ctx, in.Base, b.auth.Header(0))
		if err != nil {
			return nil, fmt.Errorf("socket %d: %w", i, err)
		}
		defer c.CloseNow()
		conns[i] = c
	}
	end := time.Now().Add(b.c.duration)
	for i, c := range conns {
		wg.Add(2)
		go func() { // answers
			defer wg.Done()
			for {
				rctx, cancel := context.WithDeadline(ctx, end.Add(2*time.Second))
				_, data, err := c.Read(rctx)
				cancel()
				if err != nil {
					return
				}
				var m struct {
					Type    string
					Problem struct{ Status int }
				}
				_ = json.Unmarshal(data, &m)
				switch {
				case m.Type == "result":
					served.Add(1)
				case m.Type == "error" && m.Problem.Status == http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
		go func() { // acquires of new names, below the message rate
			defer wg.Done()
			tick := time.NewTicker(time.Second / 190)
			defer tick.Stop()
			for id := 2; time.Now().Before(end); id++ {
				<-tick.C
				if c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"type":"acquire","id":%d,"name":"s.%d.%d","holder":"h"}`, id, i, id)) != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := b.c.duration.Seconds()
	rows := []row{{bin, fmt.Sprintf("rate: %d session sockets of one principal", b.c.rateSockets), "acquires served / refused 429 / other, per second",
		fmt.Sprintf("%.0f / %.0f / %.0f", float64(served.Load())/secs, float64(limited.Load())/secs, float64(other.Load())/secs)}}
	time.Sleep(3 * time.Second) // the bucket refills
	served.Store(0)
	limited.Store(0)
	other.Store(0)
	end = time.Now().Add(b.c.duration)
	for g := range b.c.rateSockets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(end); k++ {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/v1/leases/r.%d.%d:acquire", in.Base, g, k),
					strings.NewReader(`{"holder":"h","ttlMs":60000}`))
				if err != nil {
					return
				}
				req.Header = b.auth.Header(0)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					served.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	rows = append(rows, row{bin, fmt.Sprintf("rate: %d REST callers of one principal", b.c.rateSockets), "acquires served / refused 429 / other, per second",
		fmt.Sprintf("%.0f / %.0f / %.0f", float64(served.Load())/secs, float64(limited.Load())/secs, float64(other.Load())/secs)})
	return rows, nil
}

// scaleMix opens b.c.scaleSessions sessions at window 1 s over the
// principals, at the default settings, each acquiring one lease, and
// keeps them heartbeating for b.c.duration.
func scaleMix(ctx context.Context, b *bench, bin string) ([]row, error) {
	in, err := start(ctx, b, bin, nil)
	if err != nil {
		return nil, err
	}
	defer in.Stop()
	time.Sleep(time.Second) // settle before the baseline
	base, err := in.RSS()
	if err != nil {
		return nil, err
	}
	n := b.c.scaleSessions
	agents := make([]*rawsession.Agent, n)
	var refused, limited atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a := &rawsession.Agent{URLs: []string{in.Base}, Window: time.Second, Header: b.auth.Header(i % b.c.principals)}
			if _, err := a.Open(ctx); err != nil {
				refused.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			for try := 0; ; try++ { // a 429 is retried after its hint, as the SDKs do
				_, err := a.Acquire(ctx, fmt.Sprintf("scale.%d", i), "h", 0)
				if err != nil && strings.Contains(err.Error(), "429") && try < 10 {
					limited.Add(1)
					time.Sleep(time.Second)
					continue
				}
				if err != nil {
					refused.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				break
			}
			agents[i] = a
		}()
	}
	wg.Wait()
	defer func() {
		for _, a := range agents {
			if a != nil {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = a.Close(cctx)
				cancel()
			}
		}
	}()
	time.Sleep(b.c.duration)
	opened, err := in.RSS()
	if err != nil {
		return nil, err
	}
	lapsed, ended := 0, 0
	for _, a := range agents {
		switch {
		case a == nil:
		case a.Ended():
			ended++
		case !a.Leads() || len(a.Held()) != 1:
			lapsed++
		}
	}
	note := ""
	if e, ok := firstErr.Load().(string); ok {
		note = " (first: " + e + ")"
	}
	mix := fmt.Sprintf("scale: %d sessions at window 1 s over %d principals, default settings, %v", n, b.c.principals, b.c.duration)
	return []row{
		{bin, mix, "opens or acquires refused / acquires retried after a 429", fmt.Sprintf("%d%s / %d", refused.Load(), note, limited.Load())},
		{bin, mix, "sessions ended / not leading their lease at the end", fmt.Sprintf("%d / %d", ended, lapsed)},
		{bin, mix, "RSS before, growth with the sessions open (MiB; KiB a session)", fmt.Sprintf("%.0f, %+.0f; %.0f", base, opened-base, (opened-base)*1024/float64(max(n, 1)))},
	}, nil
}
