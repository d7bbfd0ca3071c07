package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/leasesvc/leasesvc/lease"
)

// ttl is the shortest default TTL, for holdings a test lets run out, so that
// real-time expiry is quick.
const ttl = time.Second

// live is the TTL of holdings a test needs to stay live while it runs. It is
// long so that a loaded machine (a shared emulator, parallel tests, the race
// detector) cannot stall a test past a holding's expiry.
const live = time.Minute

// acquire acquires name for holder with the TTL live.
func acquire(t *testing.T, m *lease.Manager, name, holder string) lease.Lease {
	t.Helper()
	return acquireFor(t, m, name, holder, live)
}

// acquireFor acquires name for holder with the given TTL.
func acquireFor(t *testing.T, m *lease.Manager, name, holder string, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: holder, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", name, holder, err)
	}
	return l
}

func get(t *testing.T, m *lease.Manager, name string) lease.Lease {
	t.Helper()
	l, err := m.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return l
}

// sameState reports whether two views show the same stored lease.
// sameState reports whether two views show the same stored state: every
// field but the time of the view.
func sameState(a, b lease.Lease) bool {
	return cmp.Equal(a, b, equate, cmpopts.IgnoreFields(lease.Lease{}, "ServerTime"))
}

// leaseDiff describes how got differs from want, every field compared.
func leaseDiff(want, got lease.Lease) string { return cmp.Diff(want, got, equate) }

func testAcquireNew(t *testing.T, e *env) {
	m := e.manager(t, nil)
	l, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: e.name("new"), Holder: "a", TTL: 1500 * time.Millisecond, Metadata: json.RawMessage(` { "addr" : "x" } `)})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	now := l.ServerTime
	want := lease.Lease{Record: lease.Record{Name: e.name("new"), Holder: "a", FencingToken: 1, TTL: 1500 * time.Millisecond, AcquireTime: now, RenewTime: now, ExpireTime: now.Add(1500 * time.Millisecond), Transitions: 1, Metadata: json.RawMessage(`{"addr":"x"}`)}, ServerTime: now}
	if d := leaseDiff(want, l); d != "" {
		t.Fatalf("Acquire: a new holding at the server time, metadata compacted (-want +got):\n%s", d)
	}
	if !l.Held() || l.Remaining() != 1500*time.Millisecond {
		t.Fatalf("held %v remaining %v, want true 1.5s", l.Held(), l.Remaining())
	}
	if g := get(t, m, l.Name); !sameState(g, l) {
		t.Fatalf("Get = %+v, want %+v", g, l)
	}
}

func testAcquireRace(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("race")
	const n = 50
	var wg sync.WaitGroup
	results := make([]error, n)
	leases := make([]lease.Lease, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], results[i] = m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: fmt.Sprintf("h%d", i), TTL: time.Minute})
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	var winner string
	for i, err := range results {
		switch {
		case err == nil:
			winners++
			winner = leases[i].Holder
			if leases[i].FencingToken != 1 {
				t.Errorf("winner %s got token %d, want 1", winner, leases[i].FencingToken)
			}
		case errors.Is(err, lease.ErrHeld):
		default:
			t.Errorf("racer h%d: %v, want success or ErrHeld", i, err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d racers won, want exactly 1", winners)
	}
	for i, err := range results {
		var held *lease.HeldError
		if errors.As(err, &held) && held.Lease.Holder != winner {
			t.Errorf("racer h%d refused with holder %q, want the winner %q", i, held.Lease.Holder, winner)
		}
	}
	if l := get(t, m, name); l.Holder != winner || l.FencingToken != 1 || l.Transitions != 1 {
		t.Fatalf("stored %+v, want holder %s token 1 transitions 1", l, winner)
	}
}

func testAcquireHeld(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("held")
	a := acquire(t, m, name, "a")
	_, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "b", TTL: ttl})
	var held *lease.HeldError
	if !errors.As(err, &held) || !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("Acquire by b = %v, want *HeldError", err)
	}
	if held.Lease.Holder != "a" || held.Lease.FencingToken != 1 || !held.Lease.ExpireTime.Equal(a.ExpireTime) || !held.Lease.Held() {
		t.Fatalf("refusal carries %+v, want a's live holding", held.Lease)
	}
	if g := get(t, m, name); !sameState(g, a) {
		t.Fatalf("refused acquire changed the lease: %+v, was %+v", g, a)
	}
}

func testAcquireIdempotent(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("idem")
	first, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Metadata: json.RawMessage(`{"v":1}`)})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	e.pass(100 * time.Millisecond)
	again, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: 2 * live})
	if err != nil {
		t.Fatalf("repeat Acquire: %v", err)
	}
	switch {
	case again.FencingToken != 1, again.Transitions != 1, !again.AcquireTime.Equal(first.AcquireTime):
		t.Fatalf("repeat Acquire = %+v, want the same holding (token 1, transitions 1, acquireTime %v)", again, first.AcquireTime)
	case !again.RenewTime.Equal(again.ServerTime), !again.ExpireTime.Equal(again.ServerTime.Add(2 * live)):
		t.Fatalf("repeat Acquire did not extend as renew: renew %v expire %v server %v", again.RenewTime, again.ExpireTime, again.ServerTime)
	case !again.ExpireTime.After(first.ExpireTime):
		t.Fatalf("expireTime %v not after the first %v", again.ExpireTime, first.ExpireTime)
	case string(again.Metadata) != `{"v":1}`:
		t.Fatalf("omitted metadata did not keep the stored one: %s", again.Metadata)
	}
	third, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Metadata: json.RawMessage(`{"v":2}`)})
	if err != nil || string(third.Metadata) != `{"v":2}` || third.FencingToken != 1 {
		t.Fatalf("repeat Acquire with metadata = %+v, %v; want token 1 and metadata replaced", third, err)
	}
}

func testAcquireInvalid(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("inv")
	bad := []lease.AcquireRequest{
		{Name: name + "/x", Holder: "a", TTL: ttl},
		{Name: "", Holder: "a", TTL: ttl},
		{Name: name, Holder: "", TTL: ttl},
		{Name: name, Holder: "a\x00", TTL: ttl},
		{Name: name, Holder: "a", TTL: 999 * time.Millisecond},
		{Name: name, Holder: "a", TTL: time.Hour + time.Millisecond},
		{Name: name, Holder: "a", TTL: ttl, Metadata: json.RawMessage(`[1]`)},
		{Name: name, Holder: "a", TTL: ttl, Metadata: json.RawMessage(`{"a":`)},
		{Name: name, Holder: "a", TTL: ttl, Wait: time.Minute + time.Millisecond},
	}
	for _, req := range bad {
		if _, err := m.Acquire(t.Context(), req); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Acquire(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	if _, err := m.Get(t.Context(), name); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get after refused acquires = %v, want ErrNotFound", err)
	}
}

func testTokenSequence(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("seq")
	a := acquire(t, m, name, "a")
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: a.FencingToken}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b := acquireFor(t, m, name, "b", ttl)
	e.expire(ttl)
	c := acquireFor(t, m, name, "c", ttl)
	e.expire(ttl)
	c2 := acquire(t, m, name, "c") // the same holder after expiry: a new holding
	got := []int64{a.FencingToken, b.FencingToken, c.FencingToken, c2.FencingToken}
	for i, tok := range got {
		if tok != int64(i+1) {
			t.Fatalf("tokens %v, want 1 2 3 4", got)
		}
	}
	if c2.Transitions != 4 || !c2.AcquireTime.Equal(c2.ServerTime) {
		t.Fatalf("re-acquire after expiry = %+v, want transitions 4 and a new acquireTime", c2)
	}
	if !b.AcquireTime.Before(c.AcquireTime) || c.AcquireTime.Before(b.ExpireTime) {
		t.Fatalf("c acquired at %v, before b's expiry %v", c.AcquireTime, b.ExpireTime)
	}
}

func testRenew(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("renew")
	a, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Metadata: json.RawMessage(`{"v":1}`)})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	e.pass(100 * time.Millisecond)
	r, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: a.FencingToken})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	want := a // the same holding, ttl and metadata kept, renewed at the server time
	want.RenewTime, want.ExpireTime, want.ServerTime = r.ServerTime, r.ServerTime.Add(live), r.ServerTime
	if d := leaseDiff(want, r); d != "" || !r.ExpireTime.After(a.ExpireTime) {
		t.Fatalf("Renew (-want +got):\n%s", d)
	}
	r2, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1, TTL: 5 * time.Second, Metadata: json.RawMessage(`{}`)})
	if err != nil || r2.TTL != 5*time.Second || !r2.ExpireTime.Equal(r2.ServerTime.Add(5*time.Second)) || string(r2.Metadata) != `{}` {
		t.Fatalf("Renew with ttl and metadata = %+v, %v; want ttl 5s and metadata {}", r2, err)
	}
}

func testRenewLost(t *testing.T, e *env) {
	m := e.manager(t, nil)
	acquire(t, m, e.name("live"), "a")
	expired := e.name("expired")
	acquireFor(t, m, expired, "a", ttl)
	released := e.name("released")
	acquire(t, m, released, "a")
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: released, Holder: "a", FencingToken: 1}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	e.expire(ttl)
	live2 := e.name("live2")
	acquire(t, m, live2, "a")
	cases := []struct {
		name string
		req  lease.RenewRequest
	}{
		{"wrong holder", lease.RenewRequest{Name: live2, Holder: "b", FencingToken: 1}},
		{"wrong token", lease.RenewRequest{Name: live2, Holder: "a", FencingToken: 2}},
		{"expired", lease.RenewRequest{Name: expired, Holder: "a", FencingToken: 1}},
		{"released", lease.RenewRequest{Name: released, Holder: "a", FencingToken: 1}},
		{"absent", lease.RenewRequest{Name: e.name("absent"), Holder: "a", FencingToken: 1}},
	}
	for _, c := range cases {
		before, _ := m.Get(t.Context(), c.req.Name)
		if _, err := m.Renew(t.Context(), c.req); !errors.Is(err, lease.ErrLost) {
			t.Errorf("%s: Renew = %v, want ErrLost", c.name, err)
		}
		after, _ := m.Get(t.Context(), c.req.Name)
		if !sameState(before, after) {
			t.Errorf("%s: refused renew changed %+v into %+v", c.name, before, after)
		}
	}
	if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: expired, Holder: "b", TTL: ttl}); err != nil {
		t.Fatalf("acquire of an expired lease: %v", err)
	}
}

func testRelease(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("rel")
	a := acquire(t, m, name, "a")
	e.pass(50 * time.Millisecond)
	r, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: a.FencingToken})
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	want := a // the same holding, ended at the server time
	want.ExpireTime, want.ServerTime = r.ServerTime, r.ServerTime
	if d := leaseDiff(want, r); d != "" || r.Held() {
		t.Fatalf("Release: not held, expireTime = serverTime, the rest kept (-want +got):\n%s", d)
	}
	e.pass(50 * time.Millisecond)
	again, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1})
	if err != nil || !again.ExpireTime.Equal(r.ExpireTime) {
		t.Fatalf("repeated Release = %+v, %v; want success with the same expireTime %v", again, err, r.ExpireTime)
	}
	// Releasing one's own holding that already ran out succeeds and keeps expireTime.
	name2 := e.name("rel-expired")
	b := acquireFor(t, m, name2, "b", ttl)
	e.expire(ttl)
	r2, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name2, Holder: "b", FencingToken: b.FencingToken})
	if err != nil || !r2.ExpireTime.Equal(b.ExpireTime) {
		t.Fatalf("Release after expiry = %+v, %v; want success with expireTime %v unchanged", r2, err, b.ExpireTime)
	}
	if n := acquire(t, m, name, "c"); n.FencingToken != 2 {
		t.Fatalf("acquire after release got token %d, want 2", n.FencingToken)
	}
}

func testReleaseLost(t *testing.T, e *env) {
	m := e.manager(t, nil)
	name := e.name("rl")
	acquire(t, m, name, "a")
	for _, req := range []lease.ReleaseRequest{
		{Name: name, Holder: "b", FencingToken: 1},
		{Name: name, Holder: "a", FencingToken: 2},
		{Name: e.name("absent"), Holder: "a", FencingToken: 1},
	} {
		if _, err := m.Release(t.Context(), req); !errors.Is(err, lease.ErrLost) {
			t.Errorf("Release(%+v) = %v, want ErrLost", req, err)
		}
	}
	if l := get(t, m, name); !l.Held() || l.Holder != "a" {
		t.Fatalf("refused releases changed the lease: %+v", l)
	}
	// After someone else acquired, the old holder's release is lost.
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	acquire(t, m, name, "b")
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("stale Release after a new holding = %v, want ErrLost", err)
	}
}

func testGetNotFound(t *testing.T, e *env) {
	m := e.manager(t, nil)
	if _, err := m.Get(t.Context(), e.name("nope")); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Get(never acquired) = %v, want ErrNotFound", err)
	}
	if _, err := m.Get(t.Context(), "bad/name"); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Get(bad name) = %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Acquire(ctx, lease.AcquireRequest{Name: e.name("c"), Holder: "a", TTL: ttl}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(cancelled) = %v, want context.Canceled", err)
	}
}

func testListPaging(t *testing.T, e *env) {
	m := e.manager(t, nil)
	var want []string
	for _, s := range []string{"e", "a", "d", "b", "c"} {
		acquire(t, m, e.name(s), "h")
	}
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		want = append(want, e.name(s))
	}
	var got []string
	tok := ""
	pages := 0
	for {
		res, err := m.List(t.Context(), lease.ListRequest{Prefix: e.prefix, PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		pages++
		for _, l := range res.Leases {
			got = append(got, l.Name)
			if !l.Held() || l.Holder != "h" {
				t.Errorf("listed %+v, want held by h", l)
			}
		}
		if tok = res.NextPageToken; tok == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || pages != 3 {
		t.Fatalf("listed %v in %d pages, want %v in 3", got, pages, want)
	}
	empty, err := m.List(t.Context(), lease.ListRequest{Prefix: e.name("zzz")})
	if err != nil || empty.Leases == nil || len(empty.Leases) != 0 || empty.NextPageToken != "" {
		t.Fatalf("List(no match) = %+v, %v; want an empty, non-nil page", empty, err)
	}
	first, _ := m.List(t.Context(), lease.ListRequest{Prefix: e.prefix, PageSize: 1})
	for _, req := range []lease.ListRequest{
		{Prefix: e.prefix, PageToken: "%%%"},
		{Prefix: e.prefix, PageToken: "dGhpcyBpcyBub3QgYSB0b2tlbg"},
		{Prefix: e.name("a"), PageToken: first.NextPageToken},
		{Prefix: "bad/prefix"},
		{Prefix: e.prefix, PageSize: -1},
	} {
		if _, err := m.List(t.Context(), req); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("List(%+v) = %v, want ErrInvalid", req, err)
		}
	}
}

// recorder collects the events a Manager reports.
type recorder struct {
	mu     sync.Mutex
	events []lease.Event
}

func (r *recorder) add(ev lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) take() []lease.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func testEvents(t *testing.T, e *env) {
	rec := &recorder{}
	m := e.manager(t, rec.add)
	name := e.name("ev")
	expect := func(step string, want ...string) []lease.Event {
		t.Helper()
		evs := rec.take()
		var got []string
		for _, ev := range evs {
			got = append(got, fmt.Sprintf("%s/%s/%d", ev.Type, ev.Lease.Holder, ev.Lease.FencingToken))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: events %v, want %v", step, got, want)
		}
		return evs
	}
	a := acquire(t, m, name, "a")
	evs := expect("first acquire", "acquired/a/1")
	if evs[0].PreviousHolder != "" || !evs[0].Time.Equal(a.ServerTime) {
		t.Fatalf("first acquired event %+v, want no previous holder and time = serverTime", evs[0])
	}
	acquire(t, m, name, "a")
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	_, _ = m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "b", TTL: ttl})
	expect("repeat acquire, renew, refused acquire")
	r, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1})
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	evs = expect("release", "released/a/1")
	if !evs[0].Time.Equal(r.ServerTime) || evs[0].Lease.Held() {
		t.Fatalf("released event %+v, want time = release serverTime and not held", evs[0])
	}
	_, _ = m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1})
	expect("repeated release")
	acquireFor(t, m, name, "b", ttl)
	evs = expect("acquire after release", "acquired/b/2")
	if evs[0].PreviousHolder != "a" || evs[0].PreviousExpired {
		t.Fatalf("acquired event %+v, want previous holder a, released (not expired)", evs[0])
	}
	e.expire(ttl)
	_, _ = m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "b", FencingToken: 2})
	expect("release of an expired holding")
	acquire(t, m, name, "c")
	evs = expect("acquire after expiry", "acquired/c/3")
	if evs[0].PreviousHolder != "b" || !evs[0].PreviousExpired {
		t.Fatalf("acquired event %+v, want previous holder b, expired", evs[0])
	}
}
