package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// sessionKey is a session key (the hex SHA-256 of a session id); otherKey
// another session's.
var (
	sessionKey = strings.Repeat("ab", 32)
	otherKey   = strings.Repeat("cd", 32)
)

// sessionTTL is the session lease TTL of these tests: longer than the
// Manager's MaxTTL, which a session write is not bound by.
const sessionTTL = 2 * time.Hour

func ref(key string, epoch int64) *lease.SessionRef {
	return &lease.SessionRef{Key: key, Epoch: epoch, Window: time.Second}
}

// sessionWorld is a Manager over a memory store whose clock moves only by
// hand, and the events it reported.
type sessionWorld struct {
	m     *lease.Manager
	store *memory.Store
	clock *memory.ManualClock
	mu    sync.Mutex
	evs   []lease.Event
}

func newSessionWorld(t *testing.T) *sessionWorld {
	t.Helper()
	w := &sessionWorld{clock: memory.NewManualClock(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))}
	w.store = memory.New(memory.WithClock(w.clock.Now))
	m, err := lease.NewManager(w.store, lease.Config{OnChange: func(ev lease.Event) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.evs = append(w.evs, ev)
	}})
	if err != nil {
		t.Fatal(err)
	}
	w.m = m
	return w
}

// events returns the events reported since the last call.
func (w *sessionWorld) events() []lease.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs := w.evs
	w.evs = nil
	return evs
}

// hold acquires name for holder through the session key at epoch 1.
func (w *sessionWorld) hold(t *testing.T, name, holder string) lease.Lease {
	t.Helper()
	l, err := w.m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: holder, TTL: sessionTTL, Session: ref(sessionKey, 1)})
	if err != nil {
		t.Fatalf("acquire %s through the session: %v", name, err)
	}
	w.events()
	return l
}

// get returns the lease under name.
func (w *sessionWorld) get(t *testing.T, name string) lease.Lease {
	t.Helper()
	l, err := w.m.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestSessionAcquire: an acquire through a session records the session on
// the holding with the session lease TTL, whatever MaxTTL says; a repeat
// acquire by the holder must come through the same session at the same
// epoch; a holding that is not through a session carries no session.
func TestSessionAcquire(t *testing.T) {
	w := newSessionWorld(t)
	ctx := t.Context()
	l := w.hold(t, "a", "h")
	if !l.Session || l.SessionKey != sessionKey || l.SessionEpoch != 1 || l.SessionWindow != time.Second || l.TTL != sessionTTL || l.Remaining() != sessionTTL {
		t.Fatalf("acquire through a session = %+v; want session %s epoch 1, window 1s, TTL %v", l, sessionKey, sessionTTL)
	}
	for _, tc := range []struct {
		name    string
		session *lease.SessionRef
		want    error // nil: the same holding, extended
	}{
		{"plain repeat acquire", nil, lease.ErrSessionHeld},
		{"through another session", ref(otherKey, 1), lease.ErrSessionHeld},
		{"through the session at its epoch", ref(sessionKey, 1), nil},
		// A resume that did not claim the holding (its acquire's answer
		// was lost with the socket): the session's later epoch takes it.
		{"through the session at a later epoch", ref(sessionKey, 2), nil},
		{"through the session at the earlier epoch", ref(sessionKey, 1), lease.ErrLost},
	} {
		w.clock.Advance(time.Second)
		ttl := sessionTTL
		if tc.session == nil {
			ttl = time.Minute
		}
		got, err := w.m.Acquire(ctx, lease.AcquireRequest{Name: "a", Holder: "h", TTL: ttl, Session: tc.session})
		if tc.want != nil {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s = %+v, %v; want %v", tc.name, got, err, tc.want)
			}
			if now := w.get(t, "a"); now.RenewTime != l.RenewTime || now.SessionEpoch != l.SessionEpoch {
				t.Errorf("%s changed the holding: %+v", tc.name, now)
			}
			continue
		}
		if err != nil || got.FencingToken != l.FencingToken || !got.RenewTime.After(l.RenewTime) || got.SessionEpoch != tc.session.Epoch {
			t.Errorf("%s = %+v, %v; want the same holding extended", tc.name, got, err)
		}
		l = got
	}
	if evs := w.events(); len(evs) != 0 {
		t.Errorf("repeat acquires reported %v, want no event", evs)
	}

	// A plain holding that its holder acquires again through a session
	// joins the session.
	p, err := w.m.Acquire(ctx, lease.AcquireRequest{Name: "plain", Holder: "h", TTL: time.Minute})
	if err != nil || p.Session || p.SessionKey != "" {
		t.Fatalf("plain acquire = %+v, %v; want no session", p, err)
	}
	j, err := w.m.Acquire(ctx, lease.AcquireRequest{Name: "plain", Holder: "h", TTL: sessionTTL, Session: ref(sessionKey, 1)})
	if err != nil || j.FencingToken != p.FencingToken || !j.Session || j.TTL != sessionTTL {
		t.Fatalf("the holder's acquire through a session = %+v, %v; want its holding, now through the session", j, err)
	}

	// Once the session holding runs out, a plain acquire begins a holding
	// without the session.
	w.clock.Advance(sessionTTL)
	n, err := w.m.Acquire(ctx, lease.AcquireRequest{Name: "a", Holder: "other", TTL: time.Minute})
	if err != nil || n.FencingToken != l.FencingToken+1 || n.Session || n.SessionKey != "" || n.SessionEpoch != 0 || n.SessionWindow != 0 {
		t.Fatalf("plain acquire after the session holding ran out = %+v, %v; want token %d without session fields", n, err, l.FencingToken+1)
	}
}

// TestSessionValidation: the session fields, the session lease TTL and
// the names reserved for session records are checked before anything is
// read; a refused request changes nothing.
func TestSessionValidation(t *testing.T) {
	w := newSessionWorld(t)
	ok := ref(sessionKey, 1)
	for _, tc := range []struct {
		name  string
		req   lease.AcquireRequest
		field string // "" when valid
	}{
		{"session acquire", lease.AcquireRequest{Name: "a", Holder: "h", TTL: sessionTTL, Session: ok}, ""},
		{"zero TTL", lease.AcquireRequest{Name: "a", Holder: "h", Session: ok}, "ttlMs"},
		{"TTL not whole ms", lease.AcquireRequest{Name: "a", Holder: "h", TTL: 1500 * time.Microsecond, Session: ok}, "ttlMs"},
		{"plain TTL above MaxTTL", lease.AcquireRequest{Name: "a", Holder: "h", TTL: sessionTTL}, "ttlMs"},
		{"short key", lease.AcquireRequest{Name: "a", Holder: "h", TTL: time.Minute, Session: ref("abc", 1)}, "session.key"},
		{"upper-case key", lease.AcquireRequest{Name: "a", Holder: "h", TTL: time.Minute, Session: ref(strings.ToUpper(sessionKey), 1)}, "session.key"},
		{"epoch 0", lease.AcquireRequest{Name: "a", Holder: "h", TTL: time.Minute, Session: ref(sessionKey, 0)}, "session.epoch"},
		{"no window", lease.AcquireRequest{Name: "a", Holder: "h", TTL: time.Minute, Session: &lease.SessionRef{Key: sessionKey, Epoch: 1}}, "session.windowMs"},
		{"window not whole ms", lease.AcquireRequest{Name: "a", Holder: "h", TTL: time.Minute, Session: &lease.SessionRef{Key: sessionKey, Epoch: 1, Window: time.Microsecond}}, "session.windowMs"},
		{"reserved name, plain", lease.AcquireRequest{Name: "leasesvc.session.x", Holder: "h", TTL: time.Minute}, "name"},
		{"reserved name, the session's own record", lease.AcquireRequest{Name: lease.SessionRecordName(sessionKey), Holder: "session", TTL: time.Minute, Session: ok}, ""},
		{"reserved name, another session's record", lease.AcquireRequest{Name: lease.SessionRecordName(otherKey), Holder: "session", TTL: time.Minute, Session: ok}, "name"},
	} {
		err := w.m.ValidateAcquire(tc.req)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want valid", tc.name, err)
			}
			continue
		}
		var inv *lease.InvalidError
		if !errors.As(err, &inv) || inv.Violations[0].Field != tc.field {
			t.Errorf("%s: %v, want an invalid %s", tc.name, err, tc.field)
			continue
		}
		if _, err := w.m.Acquire(t.Context(), tc.req); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: Acquire = %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := w.m.Get(t.Context(), "a"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after refused acquires, Get = %v; want not found", err)
	}
	if got := lease.SessionRecordName(sessionKey); got != "leasesvc.session."+sessionKey[:32] || !lease.ValidName(got) {
		t.Fatalf("SessionRecordName = %q, want the prefix and the key's first 32 hex characters", got)
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"renew, epoch 0", w.m.ValidateRenew(lease.RenewRequest{Name: "a", Holder: "h", FencingToken: 1, Session: ref(sessionKey, 0)})},
		{"renew, session TTL not whole ms", w.m.ValidateRenew(lease.RenewRequest{Name: "a", Holder: "h", FencingToken: 1, TTL: time.Microsecond, Session: ref(sessionKey, 1)})},
		{"release, bad key", lease.ValidateRelease(lease.ReleaseRequest{Name: "a", Holder: "h", FencingToken: 1, Session: ref("x", 1)})},
		{"transfer, bad key", lease.ValidateTransfer(lease.TransferRequest{Name: "a", Holder: "h", FencingToken: 1, To: "b", Session: ref("x", 1)})},
	} {
		if !errors.Is(tc.err, lease.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, tc.err)
		}
	}
	if err := w.m.ValidateRenew(lease.RenewRequest{Name: "a", Holder: "h", FencingToken: 1, TTL: sessionTTL, Session: &lease.SessionRef{Key: sessionKey, Epoch: 1}}); err != nil {
		t.Errorf("a session renew with a TTL above MaxTTL and no window: %v, want valid", err)
	}
}

// sessionOp is one write to a session-held holding, through session s
// (nil: a plain one).
type sessionOp func(w *sessionWorld, ctx context.Context, l lease.Lease, s *lease.SessionRef) (lease.Lease, error)

var sessionOps = []struct {
	name string
	op   sessionOp
}{
	{"renew", func(w *sessionWorld, ctx context.Context, l lease.Lease, s *lease.SessionRef) (lease.Lease, error) {
		return w.m.Renew(ctx, lease.RenewRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Session: s})
	}},
	{"release", func(w *sessionWorld, ctx context.Context, l lease.Lease, s *lease.SessionRef) (lease.Lease, error) {
		return w.m.Release(ctx, lease.ReleaseRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Session: s})
	}},
	{"transfer", func(w *sessionWorld, ctx context.Context, l lease.Lease, s *lease.SessionRef) (lease.Lease, error) {
		return w.m.Transfer(ctx, lease.TransferRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, To: "next", Session: s})
	}},
	{"expire session", func(w *sessionWorld, ctx context.Context, l lease.Lease, s *lease.SessionRef) (lease.Lease, error) {
		return w.m.ExpireSession(ctx, lease.ReleaseRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Session: s})
	}},
}

// TestSessionCompareAndSet: every write through a session compares the
// stored session key and epoch with its own, and a mismatch is ErrLost
// and changes nothing; the matching one succeeds.
func TestSessionCompareAndSet(t *testing.T) {
	for _, op := range sessionOps {
		for _, tc := range []struct {
			name    string
			session *lease.SessionRef
		}{
			{"an older epoch", ref(sessionKey, 1)}, // the holding is at epoch 2
			{"a later epoch", ref(sessionKey, 3)},
			{"another session", ref(otherKey, 2)},
		} {
			t.Run(op.name+"/"+tc.name, func(t *testing.T) {
				w := newSessionWorld(t)
				l := w.hold(t, "a", "h")
				l, err := w.m.TakeOver(t.Context(), lease.TakeOverRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, TTL: sessionTTL, Session: *ref(sessionKey, 2)})
				if err != nil {
					t.Fatal(err)
				}
				w.clock.Advance(time.Second)
				if got, err := op.op(w, t.Context(), l, tc.session); !errors.Is(err, lease.ErrLost) {
					t.Fatalf("%s through %s = %+v, %v; want ErrLost", op.name, tc.name, got, err)
				}
				if now := w.get(t, "a"); !now.Held() || now.RenewTime != l.RenewTime || now.SessionEpoch != 2 {
					t.Fatalf("a refused %s changed the holding: %+v", op.name, now)
				}
				if evs := w.events(); len(evs) != 0 {
					t.Fatalf("a refused %s reported %v", op.name, evs)
				}
				if _, err := op.op(w, t.Context(), l, ref(sessionKey, 2)); err != nil {
					t.Fatalf("%s through the session at its epoch: %v", op.name, err)
				}
			})
		}
	}
}

// TestSessionPlainWrites: without a session, a renew, release or transfer
// of a live session-held holding is ErrSessionHeld and changes nothing
// (docs/contract.md §3 session-held holdings, §14): only its session ends
// it, so that its lost push precedes every later ack.
func TestSessionPlainWrites(t *testing.T) {
	w := newSessionWorld(t)
	ctx := t.Context()
	l := w.hold(t, "a", "h")
	if got, err := w.m.Renew(ctx, lease.RenewRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken}); !errors.Is(err, lease.ErrSessionHeld) {
		t.Fatalf("plain renew of a session-held holding = %+v, %v; want ErrSessionHeld", got, err)
	}
	if got, err := w.m.Renew(ctx, lease.RenewRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken + 1}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("plain renew with another token = %+v, %v; want ErrLost (not its holding at all)", got, err)
	}
	for _, op := range []string{"release", "transfer"} {
		name := "plain-" + op
		l := w.hold(t, name, "h")
		var err error
		if op == "release" {
			_, err = w.m.Release(ctx, lease.ReleaseRequest{Name: name, Holder: "h", FencingToken: l.FencingToken})
		} else {
			_, err = w.m.Transfer(ctx, lease.TransferRequest{Name: name, Holder: "h", FencingToken: l.FencingToken, To: "next"})
		}
		if !errors.Is(err, lease.ErrSessionHeld) {
			t.Fatalf("plain %s of a live session-held holding = %v; want ErrSessionHeld", op, err)
		}
		if evs := w.events(); len(evs) != 0 {
			t.Fatalf("a refused plain %s reported %+v; want nothing", op, evs)
		}
		if got, err := w.m.Get(ctx, name); err != nil || !got.Held() || got.SessionKey != sessionKey || got.SessionEpoch != 1 {
			t.Fatalf("after a refused plain %s: %+v, %v; want the holding unchanged", op, got, err)
		}
	}
	// A release through the session clears it too: the agent let it go.
	l = w.hold(t, "session-release", "h")
	for i := range 2 { // repeating it succeeds, as a plain release does
		if got, err := w.m.Release(ctx, lease.ReleaseRequest{Name: l.Name, Holder: "h", FencingToken: l.FencingToken, Session: ref(sessionKey, 1)}); err != nil || got.Held() || got.Session {
			t.Fatalf("release %d through the session = %+v, %v; want the holding ended, without its session", i+1, got, err)
		}
	}
	if evs := w.events(); len(evs) != 1 {
		t.Fatalf("a release through the session and its repetition reported %+v; want one event", evs)
	}
	// Revoke is unchanged: it ends the holding, and the session's next
	// write is ErrLost.
	l = w.hold(t, "revoked", "h")
	if _, err := w.m.Revoke(ctx, lease.RevokeRequest{Name: l.Name, Reason: "stuck"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Renew(ctx, lease.RenewRequest{Name: l.Name, Holder: "h", FencingToken: l.FencingToken, Session: ref(sessionKey, 1)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("session renew after a revoke = %v; want ErrLost", err)
	}
}

// TestSessionRenew: a renew through the session extends the holding by
// the session lease TTL, may change the window, and keeps the epoch.
func TestSessionRenew(t *testing.T) {
	w := newSessionWorld(t)
	l := w.hold(t, "a", "h")
	w.clock.Advance(time.Minute)
	got, err := w.m.Renew(t.Context(), lease.RenewRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, TTL: 3 * time.Hour,
		Checkpoint: []byte(`{"n":1}`), Session: &lease.SessionRef{Key: sessionKey, Epoch: 1, Window: 5 * time.Second}})
	if err != nil || got.TTL != 3*time.Hour || got.Remaining() != 3*time.Hour || got.SessionEpoch != 1 || got.SessionWindow != 5*time.Second || string(got.Checkpoint) != `{"n":1}` {
		t.Fatalf("session renew = %+v, %v; want TTL 3h, epoch 1, window 5s, the checkpoint", got, err)
	}
	got, err = w.m.Renew(t.Context(), lease.RenewRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, Session: &lease.SessionRef{Key: sessionKey, Epoch: 1}})
	if err != nil || got.SessionWindow != 5*time.Second || got.TTL != 3*time.Hour {
		t.Fatalf("session renew without a window or TTL = %+v, %v; want both kept", got, err)
	}
}

// TestExpireSession: the death of a session ends its holding with a
// released event of reason session_expired, keeping the session on the
// record; repeating it changes nothing; it needs the session.
func TestExpireSession(t *testing.T) {
	w := newSessionWorld(t)
	ctx := t.Context()
	l := w.hold(t, "a", "h")
	w.clock.Advance(time.Second)
	req := lease.ReleaseRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, Session: ref(sessionKey, 1)}
	got, err := w.m.ExpireSession(ctx, req)
	if err != nil || got.Held() || !got.Released() || !got.Session || got.SessionKey != sessionKey || got.SessionEpoch != 1 {
		t.Fatalf("ExpireSession = %+v, %v; want the holding released, still marked with its session", got, err)
	}
	evs := w.events()
	if len(evs) != 1 || evs[0].Type != lease.EventReleased || evs[0].Reason != "session_expired" || evs[0].Lease.FencingToken != l.FencingToken {
		t.Fatalf("ExpireSession reported %+v; want one released event, reason session_expired", evs)
	}
	if _, err := w.m.ExpireSession(ctx, req); err != nil {
		t.Fatalf("repeated ExpireSession: %v", err)
	}
	if evs := w.events(); len(evs) != 0 {
		t.Fatalf("repeated ExpireSession reported %+v", evs)
	}
	req.Session = nil
	if _, err := w.m.ExpireSession(ctx, req); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("ExpireSession without a session = %v; want ErrInvalid", err)
	}
	// The next holding is anyone's: the waiting acquire of another takes it.
	if n, err := w.m.Acquire(ctx, lease.AcquireRequest{Name: "a", Holder: "other", TTL: time.Minute}); err != nil || n.FencingToken != l.FencingToken+1 || n.Session {
		t.Fatalf("acquire after the session expired = %+v, %v; want the next token, no session", n, err)
	}
}

// TestTakeOver: a resume moves a holding to a later epoch, restarts an
// ended one with the same token while nobody took the lease, and is
// ErrLost otherwise; the epoch it writes fences off the older one.
func TestTakeOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, w *sessionWorld, l lease.Lease)
		epoch int64
		lost  bool
	}{
		{"live", func(*testing.T, *sessionWorld, lease.Lease) {}, 2, false},
		{"live, a much later epoch", func(*testing.T, *sessionWorld, lease.Lease) {}, 9, false},
		{"the same epoch", func(*testing.T, *sessionWorld, lease.Lease) {}, 1, true},
		{"ran out, nobody acquired since", func(_ *testing.T, w *sessionWorld, _ lease.Lease) { w.clock.Advance(sessionTTL) }, 2, false},
		{"session expired, nobody acquired since", func(t *testing.T, w *sessionWorld, l lease.Lease) {
			if _, err := w.m.ExpireSession(t.Context(), lease.ReleaseRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Session: ref(sessionKey, 1)}); err != nil {
				t.Fatal(err)
			}
		}, 2, false},
		{"taken by another since", func(t *testing.T, w *sessionWorld, l lease.Lease) {
			w.clock.Advance(sessionTTL)
			if _, err := w.m.Acquire(t.Context(), lease.AcquireRequest{Name: l.Name, Holder: "other", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}, 2, true},
		{"taken by the same holder name without the session since", func(t *testing.T, w *sessionWorld, l lease.Lease) {
			w.clock.Advance(sessionTTL)
			if _, err := w.m.Acquire(t.Context(), lease.AcquireRequest{Name: l.Name, Holder: l.Holder, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}, 2, true},
		{"revoked", func(t *testing.T, w *sessionWorld, l lease.Lease) {
			if _, err := w.m.Revoke(t.Context(), lease.RevokeRequest{Name: l.Name, Reason: "stuck"}); err != nil {
				t.Fatal(err)
			}
		}, 2, true},
		{"reserved for a waiting candidate", func(t *testing.T, w *sessionWorld, l lease.Lease) {
			plantCandidate(t, w, l.Name, "standby")
			if _, err := w.m.ExpireSession(t.Context(), lease.ReleaseRequest{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Session: ref(sessionKey, 1)}); err != nil {
				t.Fatal(err)
			}
		}, 2, true},
		{"deleted", func(t *testing.T, w *sessionWorld, l lease.Lease) {
			w.clock.Advance(sessionTTL)
			if _, err := w.m.Delete(t.Context(), lease.DeleteRequest{Name: l.Name}); err != nil {
				t.Fatal(err)
			}
		}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSessionWorld(t)
			ctx := t.Context()
			l := w.hold(t, "a", "h")
			tc.setup(t, w, l)
			before, _ := w.m.Get(ctx, "a")
			w.events()
			w.clock.Advance(time.Second)
			req := lease.TakeOverRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, TTL: sessionTTL,
				Session: lease.SessionRef{Key: sessionKey, Epoch: tc.epoch, Window: 2 * time.Second}}
			got, err := w.m.TakeOver(ctx, req)
			if tc.lost {
				if !errors.Is(err, lease.ErrLost) {
					t.Fatalf("TakeOver = %+v, %v; want ErrLost", got, err)
				}
				if after, _ := w.m.Get(ctx, "a"); after.FencingToken != before.FencingToken || after.ExpireTime != before.ExpireTime || after.SessionEpoch != before.SessionEpoch {
					t.Fatalf("a refused TakeOver changed the lease: %+v, was %+v", after, before)
				}
				return
			}
			now := w.clock.Now()
			if err != nil || !got.Held() || got.FencingToken != l.FencingToken || got.Transitions != l.Transitions || got.SessionEpoch != tc.epoch ||
				got.SessionWindow != 2*time.Second || !got.ExpireTime.Equal(now.Add(sessionTTL)) || got.Released() || got.ReservedFor != "" {
				t.Fatalf("TakeOver = %+v, %v; want token %d held at epoch %d until %v", got, err, l.FencingToken, tc.epoch, now.Add(sessionTTL))
			}
			if evs := w.events(); len(evs) != 0 {
				t.Fatalf("TakeOver reported %+v; want no event (the token's events went out)", evs)
			}
			// The old epoch is fenced off; the new one renews.
			if _, err := w.m.Renew(ctx, lease.RenewRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, Session: ref(sessionKey, 1)}); !errors.Is(err, lease.ErrLost) {
				t.Fatalf("renew at the old epoch after TakeOver = %v; want ErrLost", err)
			}
			if _, err := w.m.Renew(ctx, lease.RenewRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, Session: ref(sessionKey, tc.epoch)}); err != nil {
				t.Fatalf("renew at the new epoch: %v", err)
			}
		})
	}
}

// plantCandidate registers a waiting candidate for holder in the lease
// name, as a waiting acquire on another instance would.
func plantCandidate(t *testing.T, w *sessionWorld, name, holder string) {
	t.Helper()
	_, err := lease.UpdateWith(t.Context(), backend.NewLoop(w.store).Update, name, func(s lease.Snapshot) (*lease.Record, error) {
		next := *s.Record
		next.Candidates = []lease.Candidate{{ID: "c1", Holder: holder, Priority: 1, Since: s.ServerTime, Until: s.ServerTime.Add(time.Minute)}}
		return &next, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTakeOverRefusals: a takeover of a holding that is not the one named
// (token, holder, principal, session) is ErrLost; bad fields are invalid.
func TestTakeOverRefusals(t *testing.T) {
	w := newSessionWorld(t)
	ctx := t.Context()
	l := w.hold(t, "a", "h")
	base := lease.TakeOverRequest{Name: "a", Holder: "h", FencingToken: l.FencingToken, TTL: sessionTTL, Session: *ref(sessionKey, 2)}
	for _, tc := range []struct {
		name string
		edit func(r *lease.TakeOverRequest)
		want error
	}{
		{"another token", func(r *lease.TakeOverRequest) { r.FencingToken++ }, lease.ErrLost},
		{"another holder", func(r *lease.TakeOverRequest) { r.Holder = "x" }, lease.ErrLost},
		{"another principal", func(r *lease.TakeOverRequest) { r.Principal = alice }, lease.ErrLost},
		{"another session", func(r *lease.TakeOverRequest) { r.Session.Key = otherKey }, lease.ErrLost},
		{"a lower epoch", func(r *lease.TakeOverRequest) { r.Session.Epoch = 0 }, lease.ErrInvalid},
		{"a lease that never existed", func(r *lease.TakeOverRequest) { r.Name = "nope" }, lease.ErrLost},
		{"no TTL", func(r *lease.TakeOverRequest) { r.TTL = 0 }, lease.ErrInvalid},
		{"no window", func(r *lease.TakeOverRequest) { r.Session.Window = 0 }, lease.ErrInvalid},
	} {
		req := base
		tc.edit(&req)
		if got, err := w.m.TakeOver(ctx, req); !errors.Is(err, tc.want) {
			t.Errorf("TakeOver of %s = %+v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if now := w.get(t, "a"); now.SessionEpoch != 1 || now.RenewTime != l.RenewTime {
		t.Fatalf("refused takeovers changed the holding: %+v", now)
	}
	// A plain holding has no session to take over.
	p, err := w.m.Acquire(ctx, lease.AcquireRequest{Name: "plain", Holder: "h", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.TakeOver(ctx, lease.TakeOverRequest{Name: "plain", Holder: "h", FencingToken: p.FencingToken, TTL: sessionTTL, Session: *ref(sessionKey, 2)}); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("TakeOver of a plain holding = %v; want ErrLost", err)
	}
}

// TestTakeOverRace: of two resumes racing to the same epoch, exactly one
// takes the holding over; the other is ErrLost. It holds for the session's
// own record as for its leases.
func TestTakeOverRace(t *testing.T) {
	w := newSessionWorld(t)
	ctx := t.Context()
	record := lease.SessionRecordName(sessionKey)
	for _, name := range []string{"a", record} {
		holder := "h"
		if name == record {
			holder = "session"
		}
		l := w.hold(t, name, holder)
		for epoch := int64(2); epoch <= 20; epoch++ {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() {
					_, errs[i] = w.m.TakeOver(ctx, lease.TakeOverRequest{Name: name, Holder: holder, FencingToken: l.FencingToken, TTL: sessionTTL, Session: *ref(sessionKey, epoch)})
				})
			}
			wg.Wait()
			won, lost := 0, 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case errors.Is(err, lease.ErrLost):
					lost++
				default:
					t.Fatalf("%s epoch %d: %v", name, epoch, err)
				}
			}
			if won != 1 || lost != 1 {
				t.Fatalf("%s epoch %d: %d won, %d lost; want exactly one winner", name, epoch, won, lost)
			}
			if got := w.get(t, name); got.SessionEpoch != epoch || got.FencingToken != l.FencingToken {
				t.Fatalf("%s after the race to epoch %d: %+v", name, epoch, got)
			}
		}
	}
}
