package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// droppingService is a stand-in watch endpoint: every connection sends one
// event (the next token of lease "x", with its id) and then ends, some
// badly; some attempts are refused with 503 first. It records the
// Last-Event-ID of every request.
type droppingService struct {
	mu       sync.Mutex
	lastIDs  []string // Last-Event-ID per successful connection
	attempts int
	refuse   map[int]bool // attempt numbers answered 503
	forbid   int          // from this attempt on, 403 (0: never)
	sent     int
}

func (d *droppingService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	n := d.attempts
	d.attempts++
	refuse, forbid := d.refuse[n], d.forbid != 0 && n >= d.forbid
	if !refuse && !forbid {
		d.lastIDs = append(d.lastIDs, r.Header.Get("Last-Event-ID"))
		d.sent++
	}
	token := d.sent
	d.mu.Unlock()
	switch {
	case forbid:
		problem(w, http.StatusForbidden, "permission_denied", nil)
		return
	case refuse:
		problem(w, http.StatusServiceUnavailable, "unavailable", nil)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, ": hello\n\nid: %d\nevent: acquired\ndata: {\"type\":\"acquired\",\"lease\":{\"name\":\"x\",\"holder\":\"h%d\",\"fencingToken\":%d,\"held\":true},\"eventTime\":\"2026-11-23T18:00:00Z\"}\n\n", token*100, token, token)
	http.NewResponseController(w).Flush()
	if token%3 == 0 {
		// A connection cut in the middle of the next event.
		_, _ = fmt.Fprint(w, "id: 99999\nevent: acq")
		http.NewResponseController(w).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	}
}

func fastClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.Config{MaxAttempts: 2, Backoff: client.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStreamReconnectsForever: a stream the service drops eight times, once
// after five refusals in a row (more than MaxAttempts), keeps going for as
// long as its context lives; every reconnect sends the id of the last
// event read as Last-Event-ID, and no event is lost or repeated.
func TestStreamReconnectsForever(t *testing.T) {
	d := &droppingService{refuse: map[int]bool{4: true, 5: true, 6: true, 7: true, 8: true}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	for _, open := range []func(*client.Client, context.Context) (*client.Stream, error){
		func(c *client.Client, ctx context.Context) (*client.Stream, error) { return c.WatchPrefix(ctx, "") },
		func(c *client.Client, ctx context.Context) (*client.Stream, error) { return c.Watch(ctx, "x") },
	} {
		d.mu.Lock()
		d.attempts, d.sent, d.lastIDs = 0, 0, nil
		d.mu.Unlock()
		st, err := open(fastClient(t, srv.URL), t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var tokens []int64
		for len(tokens) < 9 {
			ev, err := st.Next()
			if err != nil {
				t.Fatalf("after %v: %v", tokens, err)
			}
			tokens = append(tokens, ev.Lease.FencingToken)
		}
		_ = st.Close()
		if want := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(tokens, want) {
			t.Fatalf("tokens %v, want %v", tokens, want)
		}
		d.mu.Lock()
		ids := slices.Clone(d.lastIDs)
		d.mu.Unlock()
		want := []string{""}
		for i := 1; i < len(ids); i++ {
			want = append(want, strconv.Itoa(i*100))
		}
		if len(ids) < 9 || !slices.Equal(ids, want) {
			t.Fatalf("Last-Event-ID per connection %q, want %q", ids, want)
		}
		if st.Reconnects() < 8 {
			t.Fatalf("%d reconnects, want ≥ 8", st.Reconnects())
		}
	}
}

// TestStreamEndsWithItsContextOrARefusal: a stream whose service keeps
// answering 503 retries until its context ends, then fails with the
// context's error; a refusal that retrying cannot change (403) ends it at
// once.
func TestStreamEndsWithItsContextOrARefusal(t *testing.T) {
	d := &droppingService{refuse: map[int]bool{}}
	for i := 1; i < 1000; i++ {
		d.refuse[i] = true
	}
	srv := httptest.NewServer(d)
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	st, err := fastClient(t, srv.URL).WatchPrefix(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err = st.Next()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Next = %v, want the context's error", err)
	}
	d.mu.Lock()
	n := d.attempts
	d.mu.Unlock()
	if n < 6 {
		t.Fatalf("%d attempts in 300 ms before the context ended, want more than MaxAttempts (2) and the old 4", n)
	}

	d2 := &droppingService{forbid: 1}
	srv2 := httptest.NewServer(d2)
	defer srv2.Close()
	st, err = fastClient(t, srv2.URL).WatchPrefix(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("after a 403 on reconnect: %v, want ErrPermissionDenied", err)
	}
}

// TestWatchPrefixOverTheService: WatchPrefix against the real API: a state
// per lease, then changes; a dropped connection is resumed and the changes
// made meanwhile come through one by one, with nothing repeated.
func TestWatchPrefixOverTheService(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{Backoff: client.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}})
	ctx := t.Context()
	if _, err := c.Acquire(ctx, "p.a", client.AcquireRequest{Holder: "a1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "q.z", client.AcquireRequest{Holder: "z", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	st, err := c.WatchPrefix(ctx, "p.")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	next := func() string {
		t.Helper()
		ev, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		return ev.ID()
	}
	if got := next(); got != "p.a/1/lease" {
		t.Fatalf("first %s, want the state of p.a", got)
	}
	if _, err := c.Release(ctx, "p.a", "a1", 1); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "p.a/1/released" {
		t.Fatalf("then %s", got)
	}
	s.CloseClientConnections()
	for i, h := range []string{"a2", "a3"} {
		if _, err := c.Acquire(ctx, "p.a", client.AcquireRequest{Holder: h, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Release(ctx, "p.a", h, int64(i+2)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for len(got) < 4 {
		got = append(got, next())
	}
	if want := []string{"p.a/2/acquired", "p.a/2/released", "p.a/3/acquired", "p.a/3/released"}; !slices.Equal(got, want) {
		t.Fatalf("after the reconnect %v, want %v", got, want)
	}
	if st.Reconnects() < 1 {
		t.Fatal("no reconnect counted")
	}
}

// TestStreamResumesAfterOverflow: a stream the service ends with an
// overflow event (its client fell behind) resumes from the last event read,
// and the overflow event is not handed to the caller.
func TestStreamResumesAfterOverflow(t *testing.T) {
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(lastIDs)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = fmt.Fprintf(w, "id: %d\nevent: acquired\ndata: {\"type\":\"acquired\",\"lease\":{\"name\":\"x\",\"holder\":\"h\",\"fencingToken\":%d,\"held\":true},\"eventTime\":\"2026-11-23T18:00:00Z\"}\n\n", n*100, n)
		if n == 1 {
			_, _ = fmt.Fprint(w, "event: overflow\ndata: {\"reason\":\"the client fell more than 262144 bytes behind the stream\"}\n\n")
			return // the service ends the stream
		}
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	st, err := fastClient(t, srv.URL).WatchPrefix(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	for want := int64(1); want <= 2; want++ {
		ev, err := st.Next()
		if err != nil || ev.Type != client.EventAcquired || ev.Lease.FencingToken != want {
			t.Fatalf("event %d: %+v, %v; want acquired with token %d", want, ev, err, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(lastIDs, []string{"", "100"}) {
		t.Fatalf("Last-Event-ID per connection %q, want the resume after 100", lastIDs)
	}
}
