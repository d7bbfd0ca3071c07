package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// goodLease is the lease the good client acquires and releases.
const goodLease = "edge.good"

// goodResult is what the good client saw: the time each acquire took to
// be answered (whatever the answer), and the acquires not answered 200 by
// status ("503") or error ("timeout", "error").
type goodResult struct {
	latencies []time.Duration
	failures  map[string]int
}

// goodClient acquires and releases goodLease over REST as the principal
// whose token is token, on connections of its own, rate times a second
// (or as fast as the answers come, when slower) until ctx ends, noting
// each acquire's latency. An acquire not answered in 30 s counts 30 s.
func goodClient(ctx context.Context, base, token string, rate int) goodResult {
	r := goodResult{failures: map[string]int{}}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer client.CloseIdleConnections()
	do := func(op, body string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/leases/"+goodLease+":"+op, strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, raw, err
	}
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return r
		case <-tick.C:
		}
		start := time.Now()
		st, raw, err := do("acquire", `{"holder":"good","ttlMs":10000}`)
		if ctx.Err() != nil {
			return r // the window ended during the acquire: not counted
		}
		r.latencies = append(r.latencies, time.Since(start))
		var l struct {
			FencingToken int64 `json:"fencingToken"`
		}
		switch {
		case err != nil:
			key := "error"
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
				key = "timeout"
			}
			r.failures[key]++
			continue
		case st != http.StatusOK:
			r.failures[fmt.Sprint(st)]++
			continue
		case json.Unmarshal(raw, &l) != nil:
			r.failures["bad answer"]++
			continue
		}
		_, _, _ = do("release", fmt.Sprintf(`{"holder":"good","fencingToken":%d}`, l.FencingToken))
	}
}

// percentile is the p-th percentile (0 < p ≤ 100) of ds by nearest rank:
// the smallest value that at least p % of them do not exceed. 0 when ds
// is empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*p/100 + 0.999999999)
	return s[min(max(rank, 1), len(s))-1]
}

// ms renders d in milliseconds, to a tenth below 10 ms.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
}

// summary renders the result as "1210 acquires, p50 1.2 / max 40 ms,
// failures: none".
func (g goodResult) summary() string {
	if len(g.latencies) == 0 {
		return "no acquire answered"
	}
	fails := make(map[string]int, len(g.failures))
	for k, v := range g.failures {
		fails[k] = v
	}
	return fmt.Sprintf("%d acquires, p50 %s / max %s ms, failures: %s", len(g.latencies), ms(percentile(g.latencies, 50)),
		ms(slices.Max(g.latencies)), orNone(countsOf(fails)))
}

// countsOf renders counts as "503×12 timeout×1", by key.
func countsOf(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
