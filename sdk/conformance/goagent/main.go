// Command goagent is the Go agent of the cross-language conformance suite
// (package sdk/conformance): it runs one case with package client and
// writes one JSON line per step on stdout, as the Python and TypeScript
// agents do for their SDKs (docs/contract.md §12).
//
// Usage: goagent CASE, with LEASESVC_URL, LEASESVC_TOKEN, LEASE_NAME,
// LEASE_HOLDER and LEASE_TTL_MS in the environment (and LEASE_KEEPER,
// LEASE_CANCEL_BEFORE_MS for the keeper and lifecycle cases). Times are
// milliseconds on the agent's monotonic clock. A "stop" line or EOF on
// stdin stops what runs; the agent then exits 0. A "go" line lets a case
// that waits for the driver go on (goLine).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// start is the origin of the agent's monotonic milliseconds.
var start = time.Now()

// msSince returns t as milliseconds since start, on the monotonic clock.
func msSince(t time.Time) float64 {
	return float64(t.Sub(start).Microseconds()) / 1000
}

var outMu sync.Mutex

// emit writes one step line.
func emit(fields map[string]any) {
	b, err := json.Marshal(fields)
	if err != nil {
		panic(err)
	}
	outMu.Lock()
	defer outMu.Unlock()
	_, _ = os.Stdout.Write(append(b, '\n'))
}

// codeOf is the API code string of an SDK error.
func codeOf(err error) string {
	var ce *client.Error
	switch {
	case errors.Is(err, client.ErrHeld):
		return "lease_held"
	case errors.Is(err, client.ErrReserved):
		return "lease_reserved"
	case errors.As(err, &ce) && ce.Code != "":
		return ce.Code
	case errors.Is(err, client.ErrLost):
		return "lease_lost"
	case errors.Is(err, client.ErrNotFound):
		return "not_found"
	case errors.Is(err, client.ErrRateLimited):
		return "resource_exhausted"
	case errors.Is(err, client.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, client.ErrUnauthenticated):
		return "unauthenticated"
	case errors.Is(err, client.ErrPermissionDenied):
		return "permission_denied"
	case errors.Is(err, client.ErrInvalid):
		return "invalid_argument"
	}
	return "internal"
}

// env is the agent's environment.
type env struct {
	name, holder string
	ttl          time.Duration
	c            *client.Client
}

func main() {
	cases := map[string]func(context.Context, env) error{
		"basic": basic, "wait": wait, "ratelimit": ratelimit, "freeze": freeze, "revoke": revoke,
		"succession": succession, "delete": deleteCase, "session": session,
		"fence": fenceCase, "keeper": keeperCase,
		"lifecycle_limit": lifecycleLimit, "lifecycle_reopen": lifecycleReopen,
		"lifecycle_cancel": lifecycleCancel, "lifecycle_renewal": lifecycleRenewal,
	}
	elector := map[string]bool{"freeze": true, "revoke": true, "session": true, "keeper": true,
		"lifecycle_limit": true, "lifecycle_reopen": true, "lifecycle_cancel": true, "lifecycle_renewal": true}
	if len(os.Args) != 2 || cases[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: goagent basic|wait|ratelimit|freeze|revoke|succession|delete|session|fence|keeper|lifecycle_limit|lifecycle_reopen|lifecycle_cancel|lifecycle_renewal")
		os.Exit(2)
	}
	ttlMs, err := strconv.Atoi(os.Getenv("LEASE_TTL_MS"))
	if err != nil || ttlMs <= 0 {
		ttlMs = 3000
	}
	e := env{name: os.Getenv("LEASE_NAME"), holder: os.Getenv("LEASE_HOLDER"), ttl: time.Duration(ttlMs) * time.Millisecond}
	cfg := client.Config{HTTPClient: &http.Client{Transport: &sendClock{next: http.DefaultTransport}}}
	if tok := os.Getenv("LEASESVC_TOKEN"); tok != "" {
		cfg.TokenSource = client.StaticToken(tok)
	}
	if e.c, err = client.New(os.Getenv("LEASESVC_URL"), cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // stdin: a "stop" line or EOF stops what runs; "go" lines go to goLine
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "stop" {
				break
			}
			if line == "go" {
				goLines <- struct{}{}
			}
		}
		cancel()
	}()
	if !elector[os.Args[1]] {
		ctx = context.Background() // the calls run to their end
	}
	if err := cases[os.Args[1]](ctx, e); err != nil {
		emit(map[string]any{"step": "error", "error": codeOf(err)})
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

// goLines carries the "go" lines of stdin (buffered: the driver need not
// wait for the agent to read).
var goLines = make(chan struct{}, 16)

// goLine waits for a "go" line on stdin; false when ctx ended first (a
// "stop" line, or EOF).
func goLine(ctx context.Context) bool {
	select {
	case <-goLines:
		return true
	case <-ctx.Done():
		return false
	}
}

// expectError runs f, which must fail, and reports its error's code (and,
// for lease_held, the holder the error carries).
func expectError(step string, f func() error) error {
	err := f()
	if err == nil {
		emit(map[string]any{"step": step, "error": "none"})
		return fmt.Errorf("%s: no error", step)
	}
	line := map[string]any{"step": step, "error": codeOf(err)}
	var held *client.HeldError
	if errors.As(err, &held) {
		line["holder"] = held.Lease.Holder
	}
	emit(line)
	return nil
}

func basic(ctx context.Context, e env) error {
	a, b := e.holder, e.holder+"-b"
	l, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: a, TTL: e.ttl})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "acquire", "holder": l.Holder, "token": l.FencingToken, "held": l.Held})
	steps := []func() error{
		func() error {
			return expectError("acquire_other", func() error {
				_, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: b, TTL: e.ttl})
				return err
			})
		},
		func() error {
			again, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: a, TTL: e.ttl})
			if err == nil {
				emit(map[string]any{"step": "acquire_again", "token": again.FencingToken})
			}
			return err
		},
		func() error {
			r, err := e.c.Renew(ctx, e.name, client.RenewRequest{Holder: a, FencingToken: l.FencingToken})
			if err == nil {
				emit(map[string]any{"step": "renew", "token": r.FencingToken})
			}
			return err
		},
		func() error {
			return expectError("renew_wrong_token", func() error {
				_, err := e.c.Renew(ctx, e.name, client.RenewRequest{Holder: a, FencingToken: 99})
				return err
			})
		},
		func() error {
			r, err := e.c.Release(ctx, e.name, a, l.FencingToken)
			if err == nil {
				emit(map[string]any{"step": "release", "token": r.FencingToken, "held": r.Held})
			}
			return err
		},
		func() error {
			return expectError("renew_after_release", func() error {
				_, err := e.c.Renew(ctx, e.name, client.RenewRequest{Holder: a, FencingToken: l.FencingToken})
				return err
			})
		},
		func() error {
			o, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: b, TTL: e.ttl})
			if err == nil {
				emit(map[string]any{"step": "acquire_other", "holder": o.Holder, "token": o.FencingToken})
			}
			return err
		},
		func() error {
			g, err := e.c.Get(ctx, e.name)
			if err == nil {
				emit(map[string]any{"step": "get", "holder": g.Holder, "token": g.FencingToken, "held": g.Held})
			}
			return err
		},
		func() error {
			return expectError("get_missing", func() error {
				_, err := e.c.Get(ctx, e.name+"-missing")
				return err
			})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	emit(map[string]any{"step": "done"})
	return nil
}

func wait(ctx context.Context, e env) error {
	emit(map[string]any{"step": "waiting"})
	t := time.Now()
	l, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: e.holder, TTL: e.ttl, Wait: 10 * time.Second})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "acquired", "token": l.FencingToken, "waitedMs": time.Since(t).Milliseconds()})
	emit(map[string]any{"step": "done"})
	return nil
}

func ratelimit(ctx context.Context, e env) error {
	t := time.Now()
	ok := 0
	for range 3 {
		if _, err := e.c.Get(ctx, e.name); err != nil {
			return err
		}
		ok++
	}
	emit(map[string]any{"step": "done", "ok": ok, "elapsedMs": time.Since(t).Milliseconds()})
	return nil
}

// runElector runs an Elector with the SDK's defaults (CancelBefore
// min(250ms, TTL/10), as in the Python and TypeScript SDKs) over a Keeper
// of plain renewals (freeze and revoke check the renewals' safe deadline;
// sessions are a case of their own) until stdin says stop; onTerm runs as
// OnStartedLeading.
func runElector(ctx context.Context, e env, onTerm func(ctx context.Context)) error {
	k, err := client.NewKeeper(ctx, e.c, client.KeeperConfig{PlainRenewals: true, TTL: e.ttl, Clock: readings{}})
	if err != nil {
		return err
	}
	defer k.Close()
	el, err := client.NewElector(k, e.name, client.ElectorConfig{
		Holder: e.holder, Callbacks: client.LeaderCallbacks{OnStartedLeading: onTerm},
	})
	if err != nil {
		return err
	}
	return el.Run(ctx)
}

func freeze(ctx context.Context, e env) error {
	reportRenews = true
	return runElector(ctx, e, func(lctx context.Context) {
		tok, _ := client.TokenFromContext(lctx)
		emit(map[string]any{"step": "leading", "token": tok})
		<-lctx.Done()
		now := time.Now()
		if !errors.Is(context.Cause(lctx), client.ErrSafeDeadline) {
			return // stopped by the driver, or lost: not this case's end
		}
		emit(map[string]any{"step": "stopped", "sinceLastSentMs": float64(now.Sub(lastSent()).Microseconds()) / 1000,
			"ttlMs": e.ttl.Milliseconds(), "driftMargin": client.DefaultDriftMargin})
	})
}

func revoke(ctx context.Context, e env) error {
	return runElector(ctx, e, func(lctx context.Context) {
		tok, _ := client.TokenFromContext(lctx)
		emit(map[string]any{"step": "leading", "token": tok})
		<-lctx.Done()
		if ctx.Err() == nil {
			emit(map[string]any{"step": "stopped", "reason": codeOf(context.Cause(lctx))})
		}
	})
}

// readings is the Keeper's clock: the system clock, remembering its last
// reading. The Keeper reads it just before it sends an acquire or renew
// (the time its safe deadline counts from) and not again until the answer,
// so the last reading when a request enters the transport is that send's.
type readings struct{ client.SystemClock }

var (
	sentMu      sync.Mutex
	lastReading time.Time
	sentLast    time.Time // the send of the last acquire or renew that succeeded
	// reportRenews: print a "renewed" line per successful renew (freeze).
	reportRenews bool
)

// Now implements client.Clock.
func (r readings) Now() time.Time {
	t := r.SystemClock.Now()
	sentMu.Lock()
	lastReading = t
	sentMu.Unlock()
	return t
}

// sendClock is the agent's transport. It notes when each acquire or renew
// that succeeds was sent, and prints a "renewed" line for each renew that
// succeeds. The send time is the Elector's own reading for that send (see
// readings), or the time the request enters the transport if earlier.
type sendClock struct {
	next http.RoundTripper
}

// lastSent returns when the last acquire or renew that succeeded was sent.
func lastSent() time.Time {
	sentMu.Lock()
	defer sentMu.Unlock()
	return sentLast
}

// RoundTrip implements http.RoundTripper.
func (s *sendClock) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := time.Now()
	sentMu.Lock()
	if !lastReading.IsZero() && lastReading.Before(sent) {
		sent = lastReading
	}
	sentMu.Unlock()
	resp, err := s.next.RoundTrip(req)
	path := req.URL.Path
	renew, acquire := strings.HasSuffix(path, ":renew"), strings.HasSuffix(path, ":acquire")
	if err == nil && resp.StatusCode == http.StatusOK && (renew || acquire) {
		sentMu.Lock()
		sentLast = sent
		sentMu.Unlock()
		if renew && reportRenews {
			emit(map[string]any{"step": "renewed", "sentMs": msSince(sent)})
		}
	}
	return resp, err
}
