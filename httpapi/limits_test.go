package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/hub"
	"github.com/leasesvc/leasesvc/lease"
)

// limitServer serves the API over store (memory when nil) on a real
// listener, with static tokens and the test policy when withAuth, and cfg's
// other fields; its log goes to the returned buffer.
func limitServer(t *testing.T, store backend.Store, withAuth bool, cfg httpapi.Config) (*httptest.Server, *httpapi.Handler, *e2e.SyncBuffer) {
	t.Helper()
	if store == nil {
		store = memory.New()
	}
	logs := &e2e.SyncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	cfg.Events = hub.New()
	if withAuth {
		authn, err := auth.ParseStatic([]byte(testTokens), "tokens.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Policy, err = auth.ParsePolicy([]byte(testPolicy), "policy.yaml"); err != nil {
			t.Fatal(err)
		}
		cfg.Authenticator = authn
		cfg.Audit = audit.New(cfg.Logger)
	}
	waits := newWaitNotes()
	m, err := lease.NewManager(store, lease.Config{OnChange: cfg.Events.Publish, OnWait: waits.note})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitsOf.Store(h, waits)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, h, logs
}

// openStream opens a :watch stream as the holder of token; it returns the
// response (body open when 200) and a func that closes it.
func openStream(t *testing.T, base, token, name string) (*http.Response, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/leases/"+name+":watch", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch %s: %v", name, err)
	}
	closed := false
	stop := func() {
		if !closed {
			closed = true
			cancel()
			_ = resp.Body.Close()
		}
	}
	t.Cleanup(stop)
	if resp.StatusCode == http.StatusOK { // read the snapshot: the stream is counted
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "event: lease") {
			t.Fatalf("watch %s: first line %q, %v", name, line, err)
		}
	}
	return resp, stop
}

func wantExhausted(t *testing.T, resp *http.Response, what string) {
	t.Helper()
	var p struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode != http.StatusTooManyRequests || p.Code != "resource_exhausted" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%s = %d %s (Retry-After %q), want 429 resource_exhausted with Retry-After", what, resp.StatusCode, p.Code, resp.Header.Get("Retry-After"))
	}
}

// TestWatchStreamCaps: a caller holds at most StreamsPerCaller streams and
// the instance at most Streams; beyond, 429 resource_exhausted with
// Retry-After; a closed stream gives its slot back.
func TestWatchStreamCaps(t *testing.T) {
	srv, _, logs := limitServer(t, nil, true, httpapi.Config{Limits: httpapi.Limits{StreamsPerCaller: 2, Streams: 3}})
	name := "team-a.streams"
	r1, close1 := openStream(t, srv.URL, flowTok, name)
	r2, _ := openStream(t, srv.URL, flowTok, name)
	if r1.StatusCode != 200 || r2.StatusCode != 200 {
		t.Fatalf("first two streams = %d, %d", r1.StatusCode, r2.StatusCode)
	}
	r3, _ := openStream(t, srv.URL, flowTok, name)
	wantExhausted(t, r3, "a caller's third stream")
	if r, _ := openStream(t, srv.URL, carolTok, name); r.StatusCode != 200 {
		t.Fatalf("another caller's first stream = %d, want 200", r.StatusCode)
	}
	r4, _ := openStream(t, srv.URL, opsTok, name)
	wantExhausted(t, r4, "a stream beyond the instance's cap")
	close1()
	// The stream's handler gives its slot back before it returns, and the
	// access log line comes after.
	waitLog(t, logs, 5*time.Second, `"msg":"request"`, `"route":"/v1/leases/{name}:watch"`, `"status":200`)
	if r, _ := openStream(t, srv.URL, opsTok, name); r.StatusCode != 200 {
		t.Fatalf("a stream once another closed = %d, want 200: its slot given back", r.StatusCode)
	}
}

// TestWatchStreamLifetime: a stream ends cleanly after StreamLifetime.
func TestWatchStreamLifetime(t *testing.T) {
	srv, _, _ := limitServer(t, nil, false, httpapi.Config{Heartbeat: time.Hour, Limits: httpapi.Limits{StreamLifetime: 300 * time.Millisecond}})
	resp, _ := openStream(t, srv.URL, "", "lifetime")
	if resp.StatusCode != 200 {
		t.Fatalf("watch = %d", resp.StatusCode)
	}
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open 5s into a 300ms lifetime")
	}
}

// waitingAcquire starts an acquire of name with waitMs as if from addr (no
// authentication: the caller is the client address) and returns its
// recorder once the handler returns.
func waitingAcquire(h http.Handler, addr, name string, waitMs int) <-chan *httptest.ResponseRecorder {
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		req := apiRequest("POST", "/v1/leases/"+name+":acquire", strings.NewReader(fmt.Sprintf(`{"holder":"w-%s","ttlMs":1000,"waitMs":%d}`, addr, waitMs)))
		req.RemoteAddr = addr + ":1234"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		out <- w
	}()
	return out
}

// TestWaitingAcquireCaps: a caller has at most WaitingPerCaller acquires
// waiting and the instance at most Waiting; beyond, 429 with Retry-After.
// An acquire that does not wait is not counted.
func TestWaitingAcquireCaps(t *testing.T) {
	_, h, _ := limitServer(t, nil, false, httpapi.Config{Limits: httpapi.Limits{WaitingPerCaller: 1, Waiting: 2}})
	name := "waiting-caps"
	first := httptest.NewRecorder()
	h.ServeHTTP(first, apiRequest("POST", "/v1/leases/"+name+":acquire", strings.NewReader(`{"holder":"owner","ttlMs":3000}`)))
	if first.Code != 200 {
		t.Fatalf("acquire = %d %s", first.Code, first.Body)
	}
	a1 := waitingAcquire(h, "10.0.0.1", name, 2500)
	b1 := waitingAcquire(h, "10.0.0.2", name, 2500)
	waitsFor(t, h).await(t, name, "w-10.0.0.1", "w-10.0.0.2") // both wait now
	check := func(w *httptest.ResponseRecorder, what string) {
		t.Helper()
		if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"resource_exhausted"`) || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s = %d %s, want 429 resource_exhausted with Retry-After", what, w.Code, w.Body)
		}
	}
	check(<-waitingAcquire(h, "10.0.0.1", name, 2500), "a caller's second waiting acquire")
	check(<-waitingAcquire(h, "10.0.0.3", name, 2500), "a waiting acquire beyond the instance's cap")
	if w := <-waitingAcquire(h, "10.0.0.1", name, 0); w.Code != http.StatusConflict {
		t.Fatalf("an acquire without wait = %d %s, want 409 (not counted)", w.Code, w.Body)
	}
	<-a1
	<-b1
	if w := <-waitingAcquire(h, "10.0.0.1", name, 100); w.Code == http.StatusTooManyRequests {
		t.Fatalf("after the waits ended, a waiting acquire = %d %s", w.Code, w.Body)
	}
}

// TestCloseStreamsAnswersWaiters: on shutdown every waiting acquire is
// answered at once with 503 unavailable and Retry-After: 1, and a new
// waiting acquire or stream gets the same answer.
func TestCloseStreamsAnswersWaiters(t *testing.T) {
	_, h, _ := limitServer(t, nil, false, httpapi.Config{})
	name := "shutdown-waiters"
	first := httptest.NewRecorder()
	h.ServeHTTP(first, apiRequest("POST", "/v1/leases/"+name+":acquire", strings.NewReader(`{"holder":"owner","ttlMs":60000}`)))
	var waits []<-chan *httptest.ResponseRecorder
	for i := range 3 {
		waits = append(waits, waitingAcquire(h, fmt.Sprintf("10.0.0.%d", i), name, 60000))
	}
	waitsFor(t, h).await(t, name, "w-10.0.0.0", "w-10.0.0.1", "w-10.0.0.2")
	start := time.Now()
	h.CloseStreams()
	for _, c := range append(waits, waitingAcquire(h, "10.0.1.1", name, 60000)) {
		select {
		case w := <-c:
			if w.Code != 503 || !strings.Contains(w.Body.String(), `"unavailable"`) || w.Header().Get("Retry-After") != "1" {
				t.Fatalf("waiting acquire on shutdown = %d %s (Retry-After %q), want 503 unavailable, Retry-After 1", w.Code, w.Body, w.Header().Get("Retry-After"))
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a waiting acquire was not answered within 2s of CloseStreams")
		}
	}
	t.Logf("waiters answered %v after CloseStreams", time.Since(start))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, apiRequest("GET", "/v1/leases/"+name+":watch", nil))
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("watch after CloseStreams = %d %s, want 503", w.Code, w.Body)
	}
}

// TestSlowBodyIsCut: on a real listener, a request whose body trickles in
// is answered 408 (or its connection closed) at the body deadline, with or
// without valid credentials, instead of being held open while Go drains it.
func TestSlowBodyIsCut(t *testing.T) {
	const deadline = 1 * time.Second
	srv, _, _ := limitServer(t, nil, true, httpapi.Config{Limits: httpapi.Limits{BodyTimeout: deadline}})
	for _, tc := range []struct{ token, path string }{
		{"wrong-token-0123456789", "/v1/leases/team-a.slow:acquire"},
		{flowTok, "/v1/leases/team-a.slow:acquire"},
		{flowTok, "/no/such/route"},
	} {
		token := tc.token
		t.Run(token[:5]+tc.path, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			start := time.Now()
			_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", tc.path, token)
			stop := make(chan struct{})
			defer close(stop)
			go func() { // one byte every 300ms, for 30s
				for range 100 {
					select {
					case <-stop:
						return
					case <-time.After(300 * time.Millisecond):
					}
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			// Read until the server closes the connection.
			got, _ := io.ReadAll(conn)
			took := time.Since(start)
			if took > 5*deadline {
				t.Fatalf("connection held %v with a %v body deadline; got %q", took, deadline, got)
			}
			if token == flowTok && strings.HasPrefix(tc.path, "/v1/") && !strings.Contains(string(got), " 408 ") {
				t.Fatalf("slow body with valid credentials answered %q, want 408", got)
			}
			t.Logf("closed after %v: %.40q", took, got)
		})
	}
}

// TestReadyzIsCached: /readyz asks the backend at most once per ReadyCache.
func TestReadyzIsCached(t *testing.T) {
	store := &pingCounter{Store: memory.New()}
	srv, _, _ := limitServer(t, store, false, httpapi.Config{Limits: httpapi.Limits{ReadyCache: time.Hour}})
	for range 20 {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("readyz = %v %v", resp, err)
		}
		_ = resp.Body.Close()
	}
	if n := store.pings.Load(); n != 1 {
		t.Fatalf("20 readyz calls pinged the backend %d times, want 1", n)
	}
}

type pingCounter struct {
	backend.Store
	pings atomic.Int64
}

func (p *pingCounter) Ping(ctx context.Context) error { p.pings.Add(1); return p.Store.Ping(ctx) }

// TestPageTokensAreSealed: a page token shows no lease name, works only for
// the caller and prefix it was given to, and an altered one is 400; with a
// shared key another instance continues the list.
func TestPageTokensAreSealed(t *testing.T) {
	key := make([]byte, httpapi.PageTokenKeySize)
	store := memory.New()
	srv, _, _ := limitServer(t, store, true, httpapi.Config{PageTokenKey: key})
	other, _, _ := limitServer(t, store, true, httpapi.Config{PageTokenKey: key})
	stranger, _, _ := limitServer(t, store, true, httpapi.Config{})
	flows := e2e.Client{URL: srv.URL, Token: flowTok}
	for _, n := range []string{"team-a.one", "team-a.two", "team-a.three"} {
		if r := flows.Post(t, "/v1/leases/"+n+":acquire", `{"holder":"h","ttlMs":30000}`); r.Status != 200 {
			t.Fatalf("acquire %s = %d %s", n, r.Status, r.Raw)
		}
	}
	r := flows.Get(t, "/v1/leases?prefix=team-a.&pageSize=1")
	tok, _ := r.Body["nextPageToken"].(string)
	if r.Status != 200 || tok == "" {
		t.Fatalf("first page = %d %s", r.Status, r.Raw)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	if strings.Contains(tok, "team") || strings.Contains(string(raw), "team-a") {
		t.Fatalf("page token %q reveals a lease name", tok)
	}
	if r := (e2e.Client{URL: other.URL, Token: flowTok}).Get(t, "/v1/leases?prefix=team-a.&pageSize=1&pageToken="+tok); r.Status != 200 {
		t.Fatalf("page 2 on an instance with the same key = %d %s", r.Status, r.Raw)
	}
	bad := func(c e2e.Client, query, what string) {
		t.Helper()
		r := c.Get(t, "/v1/leases?"+query)
		if r.Status != 400 || r.Code() != "invalid_argument" || !strings.Contains(r.Raw, "pageToken") || strings.Contains(r.Raw, "team-a.one") {
			t.Fatalf("%s = %d %s, want 400 naming pageToken and no lease", what, r.Status, r.Raw)
		}
	}
	altered := []byte(tok)
	altered[len(altered)/2] ^= 1
	bad(flows, "prefix=team-a.&pageToken="+string(altered), "an altered token")
	bad(flows, "prefix=team-a.t&pageToken="+tok, "a token for another prefix")
	bad(e2e.Client{URL: srv.URL, Token: aliceTok}, "prefix=team-a.&pageToken="+tok, "another caller's token")
	bad(e2e.Client{URL: stranger.URL, Token: flowTok}, "prefix=team-a.&pageToken="+tok, "a token of an instance with another key")
	// A token in the old, readable format is refused too.
	forged := base64.RawURLEncoding.EncodeToString([]byte("v1\x00team-a.\x00team-a.one"))
	bad(flows, "prefix=team-a.&pageToken="+forged, "a forged readable token")
	if _, err := httpapi.New(mustManager(t), httpapi.Config{PageTokenKey: []byte("short")}); err == nil {
		t.Fatal("New accepted a 5-byte PageTokenKey")
	}
}

func mustManager(t *testing.T) *lease.Manager {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestStrictBodies: invalid UTF-8 (raw or as a lone surrogate escape)
// anywhere in a body, and a repeated key at any depth, are 400 naming the
// field, and change nothing.
func TestStrictBodies(t *testing.T) {
	srv, _, _ := limitServer(t, nil, false, httpapi.Config{})
	c := e2e.Client{URL: srv.URL}
	cases := []struct{ body, field string }{
		{"{\"holder\":\"agent-\xff\",\"ttlMs\":1000}", "holder"},
		{"{\"holder\":\"agent-\xfe\",\"ttlMs\":1000}", "holder"},
		{`{"holder":"agent-\udc00","ttlMs":1000}`, "holder"},
		{"{\"holder\":\"a\",\"ttlMs\":1000,\"metadata\":{\"k\":\"\xff\"}}", "metadata.k"},
		{"{\"holder\":\"a\",\"ttlMs\":1000,\"metadata\":{\"k\":[\"ok\",\"\xc3\"]}}", "metadata.k.1"},
		{`{"holder":"a","holder":"b","ttlMs":1000}`, "holder"},
		{`{"holder":"a","ttlMs":1000,"metadata":{"k":1,"k":2}}`, "metadata.k"},
		{`{"holder":"a","ttlMs":1000,"metadata":{"x":{"y":1,"y":1}}}`, "metadata.x.y"},
	}
	for _, tc := range cases {
		r := c.Post(t, "/v1/leases/strict:acquire", tc.body)
		if r.Status != 400 || r.Code() != "invalid_argument" || !strings.Contains(r.Raw, `"field":"`+tc.field+`"`) {
			t.Errorf("%q = %d %s, want 400 naming %s", tc.body, r.Status, r.Raw, tc.field)
		}
	}
	if r := c.Get(t, "/v1/leases/strict"); r.Status != 404 {
		t.Fatalf("after refused acquires the lease is %d %s, want 404", r.Status, r.Raw)
	}
}

// TestStrictQueries: unknown, repeated or malformed query parameters are
// 400 naming the parameter.
func TestStrictQueries(t *testing.T) {
	srv, _, _ := limitServer(t, nil, false, httpapi.Config{})
	c := e2e.Client{URL: srv.URL}
	for _, tc := range []struct{ path, field string }{
		{"/v1/leases?prefix=%zz", "prefix"},
		{"/v1/leases?prefx=", "prefx"},
		{"/v1/leases?pageToken=%zz", "pageToken"},
		{"/v1/leases?prefix=a&prefix=b", "prefix"},
		{"/v1/leases?prefix=%ff", "prefix"},
		{"/v1/leases?pageSize=1;x=2", "pageSize"},
		{"/v1/leases?%zz=1", "query"},
		{"/v1/leases/a?x=1", "x"},
		{"/v1/leases/a:watch?resume=1", "resume"},
		{"/openapi.json?v=2", "v"},
	} {
		r := c.Get(t, tc.path)
		if r.Status != 400 || !strings.Contains(r.Raw, `"field":"`+tc.field+`"`) {
			t.Errorf("GET %s = %d %s, want 400 naming %s", tc.path, r.Status, r.Raw, tc.field)
		}
	}
	if r := c.Get(t, "/v1/leases?prefix=a&pageSize=5&pageToken="); r.Status != 200 {
		t.Errorf("a well-formed list = %d %s", r.Status, r.Raw)
	}
}

// TestLongPathsAreNotLogged: a 500 KB path without a token writes a few
// hundred bytes of log, not megabytes: the name is checked before any log
// line repeats it, and logged paths are cut.
func TestLongPathsAreNotLogged(t *testing.T) {
	srv, _, logs := limitServer(t, nil, true, httpapi.Config{})
	long := strings.Repeat("a", 500<<10)
	for _, p := range []string{"/v1/leases/" + long, "/v1/leases/" + long + ":acquire", "/v1/leases?prefix=" + long, "/" + long} {
		resp, err := http.Post(srv.URL+p, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		resp, err = http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if n := len(logs.String()); n > 16<<10 {
		t.Fatalf("8 requests with 500 KB paths logged %d bytes, want ≤ 16 KB", n)
	}
	for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if len(l) > 4<<10 {
			t.Fatalf("a log line of %d bytes: %.300s", len(l), l)
		}
	}
}

// TestHeadAndAllow: HEAD is answered wherever GET is, and a method the
// router does not know is 405 with the route's Allow.
func TestHeadAndAllow(t *testing.T) {
	srv, _, _ := limitServer(t, nil, false, httpapi.Config{})
	if r := (e2e.Client{URL: srv.URL}).Post(t, "/v1/leases/head:acquire", `{"holder":"h","ttlMs":30000}`); r.Status != 200 {
		t.Fatalf("acquire = %d", r.Status)
	}
	do := func(method, path string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp
	}
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json", "/v1/leases", "/v1/leases/head", "/v1/leases/head:watch"} {
		if r := do("HEAD", p); r.StatusCode != 200 {
			t.Errorf("HEAD %s = %d, want 200", p, r.StatusCode)
		}
	}
	for _, tc := range []struct{ method, path, allow string }{
		{"FOO", "/v1/leases/head", "DELETE, GET, HEAD"},
		{"FOO", "/v1/leases/head:acquire", "POST"},
		{"PURGE", "/v1/leases", "GET, HEAD"},
		{"DELETE", "/healthz", "GET, HEAD"},
		{"PUT", "/v1/leases/head:watch", "GET, HEAD"},
	} {
		r := do(tc.method, tc.path)
		if r.StatusCode != 405 || r.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s = %d Allow %q, want 405 Allow %q", tc.method, tc.path, r.StatusCode, r.Header.Get("Allow"), tc.allow)
		}
	}
}

// conflictStore gives up on every write with backend.ErrConflict, as a
// backend's every attempt does under endless contention; the loop gives up.
type conflictStore struct{ backend.Store }

func (conflictStore) Try(context.Context, string, backend.Decide) (backend.Snapshot, error) {
	return backend.Snapshot{}, fmt.Errorf("gave up: %w", backend.ErrConflict)
}

// TestConflictIsRetryable: ErrConflict is 503 unavailable with Retry-After.
func TestConflictIsRetryable(t *testing.T) {
	srv, _, _ := limitServer(t, conflictStore{memory.New()}, false, httpapi.Config{})
	r := (e2e.Client{URL: srv.URL}).Post(t, "/v1/leases/c:acquire", `{"holder":"h","ttlMs":1000}`)
	if r.Status != 503 || r.Code() != "unavailable" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("acquire over a conflicting backend = %d %s, want 503 unavailable with Retry-After", r.Status, r.Raw)
	}
}
