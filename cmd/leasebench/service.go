package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// service sends lease requests to leasesvc instances over a shared pool of
// keep-alive connections.
type service struct {
	hc      *http.Client
	timeout time.Duration
}

func newService(timeout time.Duration) *service {
	tr := &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 256, MaxConnsPerHost: 512, IdleConnTimeout: time.Minute}
	return &service{hc: &http.Client{Transport: tr}, timeout: timeout}
}

// answer is a service's answer to a lease request.
type answer struct {
	status int
	code   string      // the problem code of an error answer
	lease  lease.Lease // the lease of a 200, or of a lease_held problem
	// yieldTo is the candidate a live holding is asked to step down for
	// (docs/contract.md §8), "" when none.
	yieldTo string
	// proof is the holding's proof of an acquire answer, "" when none.
	proof string
}

// ok reports a 200.
func (a answer) ok() bool { return a.status == http.StatusOK }

// get reads {base}/v1/leases/{name}.
func (s *service) get(ctx context.Context, base, name string) (answer, error) {
	return s.send(ctx, http.MethodGet, base+"/v1/leases/"+name, "get", name, "", 0)
}

// post sends body to {base}/v1/leases/{name}:{verb}, waiting at most the
// request timeout plus extra.
func (s *service) post(ctx context.Context, base, name, verb, body string, extra time.Duration) (answer, error) {
	return s.send(ctx, http.MethodPost, base+"/v1/leases/"+name+":"+verb, verb, name, body, extra)
}

// send sends a request for the lease name and decodes the answer.
func (s *service) send(ctx context.Context, method, url, verb, name, body string, extra time.Duration) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout+extra)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", verb, name, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: %w", verb, name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read answer: %w", verb, name, err)
	}
	a := answer{status: resp.StatusCode}
	var w *wire.Lease
	if a.ok() {
		w = new(wire.Lease)
		if err := json.Unmarshal(raw, w); err != nil {
			return a, fmt.Errorf("%s %s: decode %q: %w", verb, name, raw, err)
		}
	} else {
		var p struct {
			Code  string      `json:"code"`
			Lease *wire.Lease `json:"lease"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return a, fmt.Errorf("%s %s: %d %q: %w", verb, name, resp.StatusCode, raw, err)
		}
		a.code, w = p.Code, p.Lease
	}
	if w != nil {
		a.yieldTo, a.proof = w.YieldTo, w.Proof
		if a.lease, err = w.ToLease(); err != nil {
			return a, fmt.Errorf("%s %s: %w", verb, name, err)
		}
	}
	return a, nil
}

func (s *service) acquire(ctx context.Context, base, name, holder string, ttl, wait time.Duration) (answer, error) {
	body := fmt.Sprintf(`{"holder":%q,"ttlMs":%d`, holder, ttl.Milliseconds())
	if wait > 0 {
		body += fmt.Sprintf(`,"waitMs":%d`, wait.Milliseconds())
	}
	return s.post(ctx, base, name, "acquire", body+"}", wait)
}

func (s *service) renew(ctx context.Context, base, name, holder string, token int64) (answer, error) {
	return s.post(ctx, base, name, "renew", fmt.Sprintf(`{"holder":%q,"fencingToken":%d}`, holder, token), 0)
}

func (s *service) release(ctx context.Context, base, name, holder string, token int64) (answer, error) {
	return s.post(ctx, base, name, "release", fmt.Sprintf(`{"holder":%q,"fencingToken":%d}`, holder, token), 0)
}

// candidate sends a waiting acquire as a candidate of docs/contract.md §8,
// with priority and preempt; wait 0 sends a plain acquire carrying the
// priority the holding records.
func (s *service) candidate(ctx context.Context, base, name, holder string, ttl, wait time.Duration, priority int, preempt bool) (answer, error) {
	body := fmt.Sprintf(`{"holder":%q,"ttlMs":%d,"priority":%d`, holder, ttl.Milliseconds(), priority)
	if wait > 0 {
		body += fmt.Sprintf(`,"waitMs":%d,"preempt":%t`, wait.Milliseconds(), preempt)
	}
	return s.post(ctx, base, name, "acquire", body+"}", wait)
}

// renewCheckpoint renews with a checkpoint (a JSON object).
func (s *service) renewCheckpoint(ctx context.Context, base, name, holder string, token int64, checkpoint string) (answer, error) {
	return s.post(ctx, base, name, "renew", fmt.Sprintf(`{"holder":%q,"fencingToken":%d,"checkpoint":%s}`, holder, token, checkpoint), 0)
}

// releaseCheckpoint releases with a checkpoint (a JSON object).
func (s *service) releaseCheckpoint(ctx context.Context, base, name, holder string, token int64, checkpoint string) (answer, error) {
	return s.post(ctx, base, name, "release", fmt.Sprintf(`{"holder":%q,"fencingToken":%d,"checkpoint":%s}`, holder, token, checkpoint), 0)
}

// must turns an answer other than 200 into an error.
func must(a answer, err error) (answer, error) {
	if err == nil && !a.ok() {
		err = fmt.Errorf("answer %d %s", a.status, a.code)
	}
	return a, err
}

// healthz sends GET /healthz: the HTTP round trip alone.
func (s *service) healthz(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// sse is one Server-Sent Event of a watch stream.
type sse struct {
	id, event string
	at        time.Time // when it was read
}

// watch opens GET /v1/leases/{name}:watch and sends its events (heartbeats
// left out) to the returned channel, which is closed when the stream ends;
// cancel ctx to end it.
func (s *service) watch(ctx context.Context, base, name string) (<-chan sse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/leases/"+name+":watch", nil)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", name, err)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("watch %s: %s", name, resp.Status)
	}
	out := make(chan sse, 64)
	go func() {
		defer close(out)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		var cur sse
		for sc.Scan() {
			line := sc.Bytes()
			switch {
			case len(line) == 0:
				if cur.event != "" {
					cur.at = time.Now()
					select {
					case out <- cur:
					case <-ctx.Done():
						return
					}
				}
				cur = sse{}
			case bytes.HasPrefix(line, []byte("id: ")):
				cur.id = string(line[4:])
			case bytes.HasPrefix(line, []byte("event: ")):
				cur.event = string(line[7:])
			}
		}
	}()
	return out, nil
}
