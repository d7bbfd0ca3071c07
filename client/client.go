package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
)

// Config configures a Client. The zero value is usable: every field has a
// default.
type Config struct {
	// HTTPClient sends the requests. Default: a client of its own with a
	// clone of http.DefaultTransport. Its Timeout, if set, also bounds
	// watch streams; leave it 0 and use RequestTimeout.
	HTTPClient *http.Client
	// RequestTimeout bounds one attempt of one request, not counting the
	// time an acquire may wait (AcquireRequest.Wait). Default 10s.
	RequestTimeout time.Duration
	// MaxAttempts is how many times a request is sent in all when the
	// service is unreachable or answers 429, 502, 503 or 504, ≥ 1. Default
	// 4. The context's deadline also ends the retries: a retry is not
	// started when its backoff would end after the deadline.
	MaxAttempts int
	// Backoff spaces the retries. Default DefaultBackoff (100ms … 2s). A
	// 503's Retry-After lengthens a delay up to Backoff.Max; a 429's
	// Retry-After (the caller's own rate limit) is waited in full.
	Backoff Backoff
	// UserAgent is sent with every request. Default "leasesvc-go-client".
	UserAgent string
	// TokenSource, if not nil, gives the credentials: every attempt of
	// every request, watch streams included, carries "Authorization:
	// Bearer {AccessToken}" of a token it returns. It is wrapped in
	// oauth2.ReuseTokenSource (as oauth2.NewClient does), so a token is
	// fetched again only once it is within 10s of its Expiry (never, when
	// Expiry is zero). See StaticToken, and package client/googleauth for
	// Google-signed ID tokens (Cloud Run, GCE, service-account keys). When
	// it fails, the call fails with ErrCredentials and nothing is sent.
	// Default nil: no credentials.
	TokenSource oauth2.TokenSource
}

// Client calls the leasesvc HTTP API (docs/contract.md §4). It is safe for concurrent
// use.
//
// Transient failures (connection errors, per-attempt timeouts, 429, 502,
// 503, 504) are retried with jittered exponential backoff. Retrying is safe
// for every operation but Revoke (see there): an acquire repeated by the
// same holder returns the same holding, a repeated release succeeds, and a
// renew whose answer was lost is simply renewed again. Every other refusal
// (401 and 403 included) is returned at once.
type Client struct {
	base *url.URL
	hc   *http.Client
	cfg  Config
	ts   oauth2.TokenSource // nil: no credentials

	shared sharedSession // the Electors' default session
}

// New returns a Client of the service at baseURL, such as
// "http://localhost:8080".
func New(baseURL string, cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client.New: base URL %q must be http(s)://host[:port]", baseURL)
	}
	if cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("client.New: Config.RequestTimeout %v must not be negative", cfg.RequestTimeout)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("client.New: Config.MaxAttempts %d must not be negative", cfg.MaxAttempts)
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.Backoff, err = cfg.Backoff.withDefaults("Config.Backoff"); err != nil {
		return nil, fmt.Errorf("client.New: %w", err)
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "leasesvc-go-client"
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c := &Client{base: u, hc: hc, cfg: cfg}
	if cfg.TokenSource != nil {
		c.ts = oauth2.ReuseTokenSource(nil, nonNilToken{cfg.TokenSource})
	}
	return c, nil
}

// BaseURL returns the service's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

// AcquireRequest asks for a lease.
type AcquireRequest struct {
	// Holder is the caller's identity, 1–256 printable characters.
	Holder string
	// TTL is the lease duration, whole milliseconds (1s … 1h by default on
	// the service).
	TTL time.Duration
	// Metadata, if not nil, is a JSON object (≤ 16 KiB) attached to the
	// lease; nil keeps what a repeated acquire finds stored.
	Metadata json.RawMessage
	// Wait, if positive, makes the service wait up to this long (≤ 60s) for
	// a holding by another to end before answering lease_held.
	Wait time.Duration
	// Priority, 0 … 1000, is recorded on the holding this acquire begins
	// and ranks the caller among the waiting candidates (docs/contract.md
	// §8): when a holding ends, the lease is reserved for the best one.
	// It is sent when it is not 0, or when Candidate or Preempt is set.
	Priority int
	// Candidate sends Priority even when it is 0, so that a waiting acquire
	// (Wait > 0) registers as a candidate, seen by every service instance,
	// for as long as it waits. An acquire that sends no priority waits
	// unranked, as before succession existed.
	Candidate bool
	// Preempt, on a waiting acquire (Wait > 0; the service refuses it
	// otherwise) whose Priority is strictly higher than the current
	// holding's, asks the holder to step down: the holder's renewals answer
	// YieldRequested. Nothing is taken by force. It implies Candidate.
	Preempt bool
}

// RenewRequest extends a holding.
type RenewRequest struct {
	// Holder and FencingToken name the holding.
	Holder       string
	FencingToken int64
	// TTL, if positive, replaces the holding's lease duration.
	TTL time.Duration
	// Metadata, if not nil, replaces the stored metadata.
	Metadata json.RawMessage
	// Checkpoint, if not nil, is a JSON object (≤ 16 KiB) that replaces the
	// lease's checkpoint, which the next holding inherits
	// (docs/contract.md §8); nil keeps it.
	Checkpoint json.RawMessage
}

// ReleaseRequest ends a holding (ReleaseWith).
type ReleaseRequest struct {
	// Holder and FencingToken name the holding.
	Holder       string
	FencingToken int64
	// Checkpoint, if not nil, is a JSON object (≤ 16 KiB) that replaces the
	// lease's checkpoint, for the next holder to inherit; nil keeps it. A
	// release of one's own holding that already ended (nobody acquired
	// since) still writes it.
	Checkpoint json.RawMessage
}

// TransferRequest hands a holding over to a named successor (Transfer).
type TransferRequest struct {
	// Holder and FencingToken name the caller's holding.
	Holder       string
	FencingToken int64
	// To is the successor's holder identity; it must differ from Holder.
	To string
	// Checkpoint, if not nil, is a JSON object (≤ 16 KiB) that replaces the
	// lease's checkpoint, for the successor to inherit; nil keeps it.
	Checkpoint json.RawMessage
	// Reserve is how long the lease stays reserved for To, whole
	// milliseconds, 1ms … 60s; 0 means the service's default, 5s.
	Reserve time.Duration
	// ToPrincipal, with authentication on, is the principal whose acquire
	// as To takes the reserved lease (the successor's service account,
	// say); "" means the caller's own. The service refuses it without
	// authentication.
	ToPrincipal string
}

// ListRequest asks for a page of leases.
type ListRequest struct {
	// Prefix keeps only names that start with it.
	Prefix string
	// PageSize is the most leases per page (0: the service's default, 100;
	// above 1,000 means 1,000).
	PageSize int
	// PageToken is the previous page's NextPageToken; empty for the first.
	PageToken string
}

// Acquire takes the lease if it is free or expired (a new fencing token),
// or extends the caller's own live holding (same token). Held by another:
// a *HeldError (errors.Is ErrHeld) with the current lease. Free but
// reserved for another holder (docs/contract.md §8): a *ReservedError
// (errors.Is ErrReserved). The answer of a new holding carries the
// checkpoint it inherits (Lease.Checkpoint).
func (c *Client) Acquire(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	return c.acquire(ctx, name, req, callOpts{})
}

func (c *Client) acquire(ctx context.Context, name string, req AcquireRequest, o callOpts) (Lease, error) {
	body := struct {
		Holder   string          `json:"holder"`
		TTLMs    int64           `json:"ttlMs"`
		Metadata json.RawMessage `json:"metadata,omitempty"`
		WaitMs   int64           `json:"waitMs,omitempty"`
		Priority *int            `json:"priority,omitempty"`
		Preempt  bool            `json:"preempt,omitempty"`
	}{Holder: req.Holder, TTLMs: req.TTL.Milliseconds(), Metadata: req.Metadata, WaitMs: req.Wait.Milliseconds(), Preempt: req.Preempt}
	if req.Priority != 0 || req.Candidate || req.Preempt {
		body.Priority = &req.Priority
	}
	o.extra = max(req.Wait, 0)
	var l Lease
	err := c.call(ctx, "acquire", name, http.MethodPost, leasePath(name, ":acquire"), body, &l, o)
	return l, err
}

// Renew extends the holding named by holder and token: expireTime =
// serverTime + ttl, and writes req.Checkpoint, if any. Anything but the
// current live holding is ErrLost: stop acting as leader now. An answer with
// YieldRequested asks the holder to step down (docs/contract.md §8).
func (c *Client) Renew(ctx context.Context, name string, req RenewRequest) (Lease, error) {
	return c.renew(ctx, name, req, callOpts{})
}

func (c *Client) renew(ctx context.Context, name string, req RenewRequest, o callOpts) (Lease, error) {
	body := struct {
		Holder       string          `json:"holder"`
		FencingToken int64           `json:"fencingToken"`
		TTLMs        int64           `json:"ttlMs,omitempty"`
		Metadata     json.RawMessage `json:"metadata,omitempty"`
		Checkpoint   json.RawMessage `json:"checkpoint,omitempty"`
	}{req.Holder, req.FencingToken, req.TTL.Milliseconds(), req.Metadata, req.Checkpoint}
	var l Lease
	err := c.call(ctx, "renew", name, http.MethodPost, leasePath(name, ":renew"), body, &l, o)
	return l, err
}

// Release ends the holding named by holder and token now; the next acquire
// gets token + 1. Repeating it succeeds while nobody has acquired since.
// Anything else is ErrLost.
func (c *Client) Release(ctx context.Context, name, holder string, token int64) (Lease, error) {
	return c.release(ctx, name, ReleaseRequest{Holder: holder, FencingToken: token}, callOpts{})
}

// ReleaseWith is Release with the whole request: it can also write a
// checkpoint for the next holder to inherit (docs/contract.md §8).
func (c *Client) ReleaseWith(ctx context.Context, name string, req ReleaseRequest) (Lease, error) {
	return c.release(ctx, name, req, callOpts{})
}

func (c *Client) release(ctx context.Context, name string, req ReleaseRequest, o callOpts) (Lease, error) {
	body := struct {
		Holder       string          `json:"holder"`
		FencingToken int64           `json:"fencingToken"`
		Checkpoint   json.RawMessage `json:"checkpoint,omitempty"`
	}{req.Holder, req.FencingToken, req.Checkpoint}
	var l Lease
	err := c.call(ctx, "release", name, http.MethodPost, leasePath(name, ":release"), body, &l, o)
	return l, err
}

// Transfer ends the caller's live holding now, as Release does, and
// reserves the lease for req.To for req.Reserve (docs/contract.md §8): To's
// acquire within that window, by req.ToPrincipal (default the caller's
// principal), gets the next fencing token (and the checkpoint), anyone
// else's is refused with a *ReservedError. Repeating it
// succeeds while nobody has acquired since; anything else is ErrLost.
func (c *Client) Transfer(ctx context.Context, name string, req TransferRequest) (Lease, error) {
	return c.transfer(ctx, name, req, callOpts{})
}

func (c *Client) transfer(ctx context.Context, name string, req TransferRequest, o callOpts) (Lease, error) {
	body := struct {
		Holder       string          `json:"holder"`
		FencingToken int64           `json:"fencingToken"`
		To           string          `json:"to"`
		Checkpoint   json.RawMessage `json:"checkpoint,omitempty"`
		ReserveMs    int64           `json:"reserveMs,omitempty"`
		ToPrincipal  string          `json:"toPrincipal,omitempty"`
	}{req.Holder, req.FencingToken, req.To, req.Checkpoint, req.Reserve.Milliseconds(), req.ToPrincipal}
	var l Lease
	err := c.call(ctx, "transfer", name, http.MethodPost, leasePath(name, ":transfer"), body, &l, o)
	return l, err
}

// Get returns the lease, held or not; ErrNotFound if it never existed.
func (c *Client) Get(ctx context.Context, name string) (Lease, error) {
	var l Lease
	err := c.call(ctx, "get", name, http.MethodGet, leasePath(name, ""), nil, &l, callOpts{})
	return l, err
}

// List returns one page of leases in name order.
func (c *Client) List(ctx context.Context, req ListRequest) (Page, error) {
	q := url.Values{}
	if req.Prefix != "" {
		q.Set("prefix", req.Prefix)
	}
	if req.PageSize != 0 {
		q.Set("pageSize", strconv.Itoa(req.PageSize))
	}
	if req.PageToken != "" {
		q.Set("pageToken", req.PageToken)
	}
	path := "/v1/leases"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p Page
	err := c.call(ctx, "list", req.Prefix, http.MethodGet, path, nil, &p, callOpts{})
	if p.Leases == nil {
		p.Leases = []Lease{}
	}
	return p, err
}

// All iterates over every lease whose name starts with prefix, page after
// page; it stops at the first error, which it yields.
func (c *Client) All(ctx context.Context, prefix string) iter.Seq2[Lease, error] {
	return func(yield func(Lease, error) bool) {
		req := ListRequest{Prefix: prefix, PageSize: 1000}
		for {
			p, err := c.List(ctx, req)
			if err != nil {
				yield(Lease{}, err)
				return
			}
			for _, l := range p.Leases {
				if !yield(l, nil) {
					return
				}
			}
			if p.NextPageToken == "" {
				return
			}
			req.PageToken = p.NextPageToken
		}
	}
}

// leasePath is the path of a lease with a custom method such as ":renew".
func leasePath(name, method string) string {
	return "/v1/leases/" + url.PathEscape(name) + method
}

// callOpts adjusts one call for the Elector and for Revoke.
type callOpts struct {
	timeout  time.Duration // per attempt; 0 means Config.RequestTimeout
	attempts int           // 0 means Config.MaxAttempts
	extra    time.Duration // added to the attempt timeout (an acquire's wait)
	// notIdempotent: a repeat may do what the first attempt did not mean
	// (Revoke), so only failures that show the service did not act are
	// retried (notActedOn).
	notIdempotent bool
}

// call sends a request, retrying transient failures, and decodes a 200
// answer into out. The error names the operation and the lease.
func (c *Client) call(ctx context.Context, op, name, method, path string, in, out any, o callOpts) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("leasesvc %s %q: encode request: %w", op, name, err)
		}
	}
	attempts := o.attempts
	if attempts == 0 {
		attempts = c.cfg.MaxAttempts
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = c.cfg.RequestTimeout
	}
	timeout += o.extra
	var last error
	for n := 0; ; n++ {
		err := c.once(ctx, method, path, body, out, timeout)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// The caller gave up: say so, with what the last attempt saw.
			return fmt.Errorf("leasesvc %s %q: %w (last attempt: %v)", op, name, context.Cause(ctx), err)
		}
		var e *Error
		if !errors.As(err, &e) || e.kind != ErrUnavailable || (o.notIdempotent && !notActedOn(e)) {
			return fmt.Errorf("leasesvc %s %q: %w", op, name, err)
		}
		last = err
		if n+1 >= attempts {
			break
		}
		d := c.cfg.Backoff.Delay(n)
		switch {
		case e.RetryAfter > d && e.sub == ErrRateLimited:
			d = e.RetryAfter // the caller's rate limit: sooner is refused again
		case e.RetryAfter > d:
			d = min(e.RetryAfter, c.cfg.Backoff.Max)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			break // the retry could not finish in time
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("leasesvc %s %q: %w (last attempt: %v)", op, name, context.Cause(ctx), last)
		case <-t.C:
		}
	}
	return fmt.Errorf("leasesvc %s %q: %w", op, name, last)
}

// MaxAnswerBytes bounds what the client reads of one answer: twice the
// largest list page the service may send (its LEASESVC_MAX_PAGE_BYTES is at
// most 32 MiB), so that any page fits, even one whose single lease is
// larger than the service's bound. A larger answer is an error that says so.
const MaxAnswerBytes = 64 << 20

// once sends one attempt.
func (c *Client) once(ctx context.Context, method, path string, body []byte, out any, timeout time.Duration) error {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, method, c.base.String()+path, rd)
	if err != nil {
		return &Error{Err: err, kind: ErrInvalid}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if err := c.authorize(actx, req, timeout); err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &Error{Err: err, kind: ErrUnavailable}
	}
	defer func() { _ = resp.Body.Close() }()
	tooLarge := &Error{Status: resp.StatusCode, Err: fmt.Errorf("answer larger than %d bytes (client.MaxAnswerBytes): ask for smaller pages", MaxAnswerBytes), kind: ErrInternal}
	if resp.StatusCode == http.StatusOK && resp.ContentLength > MaxAnswerBytes {
		return tooLarge
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return &Error{Status: resp.StatusCode, Err: fmt.Errorf("read answer: %w", err), kind: ErrUnavailable}
	}
	if len(raw) > MaxAnswerBytes {
		if resp.StatusCode == http.StatusOK {
			return tooLarge
		}
		raw = raw[:MaxAnswerBytes] // a problem: what it says is at its start
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			return &Error{Status: resp.StatusCode, Err: fmt.Errorf("decode answer: %w", err), kind: ErrInternal}
		}
		return nil
	}
	return problemError(resp, raw)
}

// problemJSON is the RFC 9457 problem the service answers errors with.
type problemJSON struct {
	Code   string       `json:"code"`
	Detail string       `json:"detail"`
	Errors []FieldError `json:"errors"`
	Lease  *Lease       `json:"lease"`
	// ReservedFor and ReservedUntil are members of lease_reserved.
	ReservedFor   string    `json:"reservedFor"`
	ReservedUntil time.Time `json:"reservedUntil"`
}

// problemError turns an error answer into an *Error, a *HeldError or a
// *ReservedError.
func problemError(resp *http.Response, raw []byte) error {
	var retryAfter time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		retryAfter = time.Duration(s) * time.Second
	}
	return problemFrom(resp.StatusCode, retryAfter, raw)
}

// problemFrom turns a problem document answered with status (over HTTP, or
// in a session's error message) into an *Error, a *HeldError or a
// *ReservedError.
func problemFrom(status int, retryAfter time.Duration, raw []byte) error {
	var p problemJSON
	_ = json.Unmarshal(raw, &p) // a body that is not a problem leaves p empty: the status decides
	if p.Code == "lease_held" && p.Lease != nil {
		return &HeldError{Lease: *p.Lease, RetryAfter: retryAfter}
	}
	if p.Code == "lease_reserved" && p.Lease != nil {
		e := &ReservedError{Lease: *p.Lease, ReservedFor: p.ReservedFor, ReservedUntil: p.ReservedUntil, RetryAfter: retryAfter}
		if e.ReservedFor == "" { // the lease says it too
			e.ReservedFor, e.ReservedUntil = p.Lease.ReservedFor, p.Lease.ReservedUntil
		}
		return e
	}
	kind, sub := kindOf(status, p.Code)
	e := &Error{Status: status, Code: p.Code, Detail: p.Detail, Fields: p.Errors, RetryAfter: retryAfter,
		kind: kind, sub: sub}
	if p.Code == "" && p.Detail == "" {
		e.Detail = strings.TrimSpace(string(raw[:min(len(raw), 200)]))
	}
	return e
}
