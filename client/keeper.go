package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Keeper holds leases for one agent, by plain renewals or through a
// session, and owns each holding's safe deadline. It is the one place in
// this package that knows how a lease is held: it chooses the mode once,
// at NewKeeper, and hands out Holdings of that mode (rule L1 of the SDKs'
// lifecycle). An Elector campaigns and leads over a Keeper, as etcd's
// concurrency.Election over its Session, and so do leasectl run and
// leasectl mcp.
//
// Every Holding the Keeper hands out is kept by it until it is released,
// transferred or lost, its deadline passes, or the Keeper is closed (L4):
// with plain renewals the Keeper renews it every RenewInterval (jittered);
// through a session the session's heartbeats keep it. Its owner may renew
// it too (to write a checkpoint or metadata).
//
// With plain renewals a holding's deadline is the send time of the last
// acquire or renew that succeeded + TTL × (1 − DriftMargin); through a
// session it is the session's (the send time of the last acknowledged
// heartbeat + window × (1 − DriftMargin)), and the rules by which a
// holding moves between the session's sockets (docs/contract.md §14,
// A1–A3) are the Session's. When the service ends the Keeper's own session
// (or the Client's shared one), its holdings end with ErrLost and the
// Keeper opens a new session at its next Hold (L2); a Session given in
// KeeperConfig is not reopened. A Keeper is safe for concurrent use.
type Keeper struct {
	c    *Client
	cfg  KeeperConfig
	mode KeeperMode
	how  holder        // hands out the holdings of the mode
	win  time.Duration // the session's window; 0 with plain renewals

	mu      sync.Mutex
	held    map[Holding]struct{} // handed out and not yet ended
	closed  bool
	closing chan struct{} // closed by Close
	once    sync.Once
}

// holder hands out a Keeper's holdings in its mode: plainHolder
// (holding_plain.go) or *sessionHolder (holding_session.go).
type holder interface {
	// acquire takes the lease name and returns its Holding, kept.
	acquire(ctx context.Context, name string, req AcquireRequest) (Holding, error)
	// close lets go of what the holder took (its session).
	close()
	// describe says how the holder holds, for KeeperMode.String (with
	// the reason) and Keeper.String (without).
	describe(m KeeperMode, reason bool) string
}

// KeeperConfig says how a Keeper holds its leases.
type KeeperConfig struct {
	// PlainRenewals holds the leases with plain renewals (acquire, then
	// renew) rather than through a session (reason PlainAsked).
	PlainRenewals bool
	// Session, if not nil, is the session the Keeper holds its leases
	// through; the Keeper neither closes nor reopens it. Nil (and
	// PlainRenewals false): a session of Window that the Keeper opens, or
	// with Window 0 the Client's shared session (window 1s). When the
	// service offers no sessions, or its session limit is reached, or
	// CancelBefore does not fit the window, the Keeper holds by plain
	// renewals (ModeInfo says why).
	Session *Session
	// Window is the heartbeat window of a session the Keeper opens
	// (SessionConfig.Window); 0: the Client's shared session.
	Window time.Duration
	// TTL is the lease duration of plain renewals' acquires that name
	// none, whole milliseconds. Default DefaultTTL.
	TTL time.Duration
	// RenewInterval is how long after a successful acquire or renew of a
	// plain holding the Keeper renews it (minus up to RenewJitter of it),
	// at most TTL/2. Default TTL/3. A holding acquired with another TTL is
	// renewed every third of it.
	RenewInterval time.Duration
	// RenewJitter is the fraction of RenewInterval, 0 … 0.5, by which each
	// renew comes early at random. Default 0.1.
	RenewJitter float64
	// DriftMargin is the fraction of the TTL, or of the window, given up to
	// clock-rate differences, 0.01 … 0.5. Default 0.1.
	DriftMargin float64
	// CancelBefore, if not 0, is how long before a deadline the Keeper's
	// holders stop their work (an Elector's CancelBefore): a session window
	// it does not fit (FitCancelBefore) makes the Keeper hold by plain
	// renewals (reason PlainWindow); a TTL it does not fit is an error
	// (ErrInvalid). A Session given explicitly that it does not fit is
	// refused.
	CancelBefore time.Duration
	// RetryBackoff spaces the retries of a session that failed to open and
	// of plain renewals. Default: Initial min(100ms, TTL/30), Max min(5s,
	// TTL/6), Multiplier 2.
	RetryBackoff Backoff
	// ReleaseTimeout bounds a release the Keeper makes on its own (an
	// acquire given up in flight, Close), and an Elector's release on a
	// graceful stop. Default 5s.
	ReleaseTimeout time.Duration
	// Clock is the source of local time of the Keeper and of everything
	// over it (its holdings' deadlines, an Elector's terms). Default
	// SystemClock{}.
	Clock Clock
	// Logger says how the leases are held, and every retried failure.
	// Default: no logging.
	Logger *slog.Logger
	// OnMode, if set, is called once by NewKeeper, before it returns, with
	// the mode it chose.
	OnMode func(KeeperMode)
	// OnRetry, if set, is called for every failure the Keeper retries
	// (opening its session, a renew of a plain holding), before it waits.
	// It must not block.
	OnRetry func(KeeperRetry)
}

// Validate fills the defaults into a copy of cfg and checks it, naming the
// field at fault; NewKeeper does the same.
func (cfg KeeperConfig) Validate() error {
	_, err := cfg.withDefaults()
	return err
}

func (cfg KeeperConfig) withDefaults() (KeeperConfig, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Millisecond || cfg.TTL%time.Millisecond != 0 {
		return cfg, fmt.Errorf("KeeperConfig.TTL %v must be a positive whole number of milliseconds", cfg.TTL)
	}
	if cfg.DriftMargin == 0 {
		cfg.DriftMargin = DefaultDriftMargin
	}
	if cfg.DriftMargin < 0.01 || cfg.DriftMargin > 0.5 {
		return cfg, fmt.Errorf("KeeperConfig.DriftMargin %v must be within 0.01 … 0.5", cfg.DriftMargin)
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = cfg.TTL / 3
	}
	if cfg.RenewInterval <= 0 || cfg.RenewInterval > cfg.TTL/2 {
		return cfg, fmt.Errorf("KeeperConfig.RenewInterval %v must be positive and at most TTL/2 = %v", cfg.RenewInterval, cfg.TTL/2)
	}
	if cfg.RenewJitter == 0 {
		cfg.RenewJitter = DefaultRenewJitter
	}
	if cfg.RenewJitter < 0 || cfg.RenewJitter > 0.5 {
		return cfg, fmt.Errorf("KeeperConfig.RenewJitter %v must be within 0 … 0.5", cfg.RenewJitter)
	}
	if cfg.CancelBefore < 0 {
		return cfg, fmt.Errorf("KeeperConfig.CancelBefore %v must not be negative", cfg.CancelBefore)
	}
	if cfg.Session != nil && cfg.PlainRenewals {
		return cfg, errors.New("KeeperConfig.Session and KeeperConfig.PlainRenewals exclude each other")
	}
	if cfg.RetryBackoff == (Backoff{}) {
		initial := max(time.Millisecond, min(100*time.Millisecond, cfg.TTL/30))
		cfg.RetryBackoff = Backoff{Initial: initial, Max: max(initial, min(5*time.Second, cfg.TTL/6)), Multiplier: 2}
	}
	var err error
	if cfg.RetryBackoff, err = cfg.RetryBackoff.withDefaults("KeeperConfig.RetryBackoff"); err != nil {
		return cfg, err
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.ReleaseTimeout < 0 {
		return cfg, fmt.Errorf("KeeperConfig.ReleaseTimeout %v must not be negative", cfg.ReleaseTimeout)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// NewKeeper returns a Keeper over c, its mode chosen (rule L1): plain
// renewals when cfg asks for them; else a Session given in cfg; else it
// opens its session (retrying failures other than ErrInvalid and ErrDenied
// until ctx ends, each told to OnRetry) or falls back to plain renewals
// when the service offers no sessions, refuses one at its session limit,
// or CancelBefore does not fit the window. It tells OnMode and the Logger
// which.
func NewKeeper(ctx context.Context, c *Client, cfg KeeperConfig) (*Keeper, error) {
	if c == nil {
		return nil, errors.New("client.NewKeeper: Client is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("client.NewKeeper: %w", err)
	}
	k := &Keeper{c: c, cfg: cfg, held: map[Holding]struct{}{}, closing: make(chan struct{})}
	plain := func(why PlainReason, cause error) (*Keeper, error) {
		if cfg.CancelBefore != 0 {
			if err := FitCancelBefore(cfg.TTL, cfg.DriftMargin, cfg.CancelBefore); err != nil {
				return nil, fmt.Errorf("client.NewKeeper: plain renewals (%s) with a TTL of %v: %w", why, cfg.TTL, err)
			}
		}
		return k.settle(KeeperMode{Mode: ModePlain, Reason: why, Cause: cause, Span: cfg.TTL}, plainHolder{k}), nil
	}
	through := func(sh *sessionHolder) *Keeper {
		k.win = sh.s.Window()
		return k.settle(KeeperMode{Mode: ModeSession, Span: k.win}, sh)
	}
	switch {
	case cfg.PlainRenewals:
		return plain(PlainAsked, nil)
	case cfg.Session != nil:
		if err := k.fits(cfg.Session.Window()); err != nil {
			return nil, fmt.Errorf("client.NewKeeper: the session given: %w", err)
		}
		return through(&sessionHolder{k: k, s: cfg.Session, done: func() {}}), nil
	}
	window := cfg.Window
	if window == 0 {
		window = DefaultSessionWindow
	}
	if err := k.fits(window); err != nil {
		return plain(PlainWindow, err)
	}
	scfg := SessionConfig{Window: cfg.Window, DriftMargin: cfg.DriftMargin, Logger: cfg.Logger, Clock: cfg.Clock}
	for failures := 0; ; failures++ {
		s, done, err := k.open(ctx, scfg)
		switch {
		case err == nil:
			if err := k.fits(s.Window()); err != nil {
				done()
				return plain(PlainWindow, err)
			}
			return through(&sessionHolder{k: k, own: true, scfg: scfg, s: s, done: done}), nil
		case errors.Is(err, ErrSessionsUnsupported):
			return plain(PlainSessionsUnsupported, err)
		case errors.Is(err, ErrSessionLimit):
			return plain(PlainSessionLimit, err)
		case permanent(err):
			return nil, fmt.Errorf("client.NewKeeper: %w", err)
		}
		d := retryDelay(cfg.RetryBackoff, err, failures)
		k.retrying(KeeperRetry{Op: RetryOpenSession, Attempt: failures + 1, Delay: d, Err: err})
		t := cfg.Clock.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client.NewKeeper: %w", ctx.Err())
		case <-t.C():
		}
	}
}

// settle fixes the Keeper's mode and holder, and tells OnMode and the
// Logger.
func (k *Keeper) settle(m KeeperMode, how holder) *Keeper {
	m.desc = how.describe(m, true)
	k.mode, k.how = m, how
	k.cfg.Logger.Info("leasesvc keeper: holding "+m.String(), "mode", m.Mode, "reason", string(m.Reason))
	if k.cfg.OnMode != nil {
		k.cfg.OnMode(m)
	}
	return k
}

// retrying tells the Logger and OnRetry of a failure about to be retried.
func (k *Keeper) retrying(r KeeperRetry) {
	args := []any{"attempt", r.Attempt, "retryIn", r.Delay, "err", r.Err}
	if r.Lease != "" {
		args = append(args, "lease", r.Lease, "fencingToken", r.Token)
	}
	k.cfg.Logger.Warn("leasesvc keeper: "+string(r.Op)+" failed; retrying", args...)
	if k.cfg.OnRetry != nil {
		k.cfg.OnRetry(r)
	}
}

// open opens the session of scfg, or takes the Client's shared one when
// scfg names no window.
func (k *Keeper) open(ctx context.Context, scfg SessionConfig) (*Session, func(), error) {
	if scfg.Window == 0 {
		return k.c.sharedSession(ctx, scfg, k.cfg.ReleaseTimeout)
	}
	s, err := k.c.OpenSession(ctx, scfg)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {
		cctx, cancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
		defer cancel()
		_ = s.Close(cctx)
	}, nil
}

// fits checks CancelBefore, if given, against a session window w.
func (k *Keeper) fits(w time.Duration) error {
	if k.cfg.CancelBefore == 0 {
		return nil
	}
	return FitCancelBefore(w, k.cfg.DriftMargin, k.cfg.CancelBefore)
}

// Mode says how the Keeper holds its leases: ModeSession ("session") or
// ModePlain ("plain").
func (k *Keeper) Mode() string { return k.mode.Mode }

// PlainReason says why the Keeper holds with plain renewals ("asked",
// "sessions_unsupported", "session_limit", "window"); "" through a
// session.
func (k *Keeper) PlainReason() string { return string(k.mode.Reason) }

// ModeInfo returns the Keeper's mode, its reason and span, as OnMode was
// told.
func (k *Keeper) ModeInfo() KeeperMode { return k.mode }

// Span is how long a holding lasts unconfirmed: the session's window, or
// the TTL of plain renewals. Tools derive their grace periods from it.
func (k *Keeper) Span() time.Duration { return k.mode.Span }

// Window returns the heartbeat window of the Keeper's session; 0 with
// plain renewals.
func (k *Keeper) Window() time.Duration { return k.win }

// DriftMargin is the fraction of Span given up to clock-rate differences.
func (k *Keeper) DriftMargin() float64 { return k.cfg.DriftMargin }

// Clock returns the Keeper's clock, on which its holdings' deadlines are.
func (k *Keeper) Clock() Clock { return k.cfg.Clock }

// String says how the Keeper holds its leases, for logs and agents:
// "through a session (window 1s)" or "with plain renewals (ttl 30s)".
func (k *Keeper) String() string { return k.how.describe(k.mode, false) }

// Hold acquires the lease name for req.Holder (req.TTL defaults to the
// Keeper's; through a session it is not sent) and returns the Holding,
// which the Keeper keeps until it ends (see Keeper). When ctx ends while
// the acquire is in flight, whatever it may have taken is released and
// ctx's error returned. After Close it returns ErrKeeperClosed.
func (k *Keeper) Hold(ctx context.Context, name string, req AcquireRequest) (Holding, error) {
	if k.isClosed() {
		return nil, ErrKeeperClosed
	}
	if req.TTL == 0 {
		req.TTL = k.cfg.TTL
	}
	h, err := k.how.acquire(ctx, name, req)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	closed := k.closed
	if !closed {
		k.held[h] = struct{}{}
	}
	k.mu.Unlock()
	if closed { // Close ran meanwhile: it did not see this one
		k.letGo(h)
		return nil, ErrKeeperClosed
	}
	go func() {
		select {
		case <-h.Done():
		case <-k.closing: // Close lets go of it
			return
		}
		k.mu.Lock()
		delete(k.held, h)
		k.mu.Unlock()
	}()
	return h, nil
}

// Acquire is Hold.
//
// Deprecated: use Hold; since rule L4 every holding a Keeper hands out is
// kept by it, so the two are the same. Acquire goes in the next release.
func (k *Keeper) Acquire(ctx context.Context, name string, req AcquireRequest) (Holding, error) {
	return k.Hold(ctx, name, req)
}

func (k *Keeper) isClosed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}

// Close releases every holding the Keeper still holds (all together,
// within ReleaseTimeout), stops its renewals, ends those holdings
// (ErrKeeperClosed, unless the release ended them) and lets go of the
// session it opened or shares. Close is idempotent.
func (k *Keeper) Close() {
	k.once.Do(func() {
		k.mu.Lock()
		k.closed = true
		close(k.closing)
		hs := make([]Holding, 0, len(k.held))
		for h := range k.held {
			hs = append(hs, h)
		}
		k.held = nil
		k.mu.Unlock()
		var wg sync.WaitGroup
		for _, h := range hs {
			wg.Go(func() { k.letGo(h) })
		}
		wg.Wait()
		k.how.close()
	})
}

// letGo releases h (within ReleaseTimeout) unless it ended, and ends it.
func (k *Keeper) letGo(h Holding) {
	select {
	case <-h.Done():
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
	defer cancel()
	_, _ = h.Release(ctx, nil)
	h.end(ErrKeeperClosed)
}

// retryDelay is how long to wait after the failures-th failure in a row,
// ending in err: the backoff, or the Retry-After of a 429 when longer.
func retryDelay(b Backoff, err error, failures int) time.Duration {
	d := b.Delay(failures)
	var ce *Error
	if errors.As(err, &ce) && errors.Is(ce, ErrRateLimited) && ce.RetryAfter > d {
		return ce.RetryAfter
	}
	return d
}

// isLost reports whether err says the service ended the holding.
func isLost(err error) bool { return errors.Is(err, ErrLost) }
