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
// this package that asks whether a lease is held through a session: an
// Elector campaigns and leads over a Keeper, as etcd's
// concurrency.Election over its Session, and so do leasectl run and
// leasectl mcp.
//
// With plain renewals a holding's deadline is the send time of the last
// acquire or renew that succeeded + TTL × (1 − DriftMargin); through a
// session it is the session's (the send time of the last acknowledged
// heartbeat + window × (1 − DriftMargin)), and the rules by which a
// holding moves between the session's sockets (docs/contract.md §14,
// A1–A3) are the Session's. A Keeper is safe for concurrent use.
type Keeper struct {
	c    *Client
	cfg  KeeperConfig
	sess *Session // nil: plain renewals
	why  string   // with plain renewals: why (" (…)"; "" when asked for), for the Elector's mode line
	done func()   // lets go of the session, if the Keeper took one
	once sync.Once
}

// KeeperConfig says how a Keeper holds its leases.
type KeeperConfig struct {
	// PlainRenewals holds the leases with plain renewals (acquire, then
	// renew) rather than through a session.
	PlainRenewals bool
	// Session, if not nil, is the session the Keeper holds its leases
	// through; the Keeper does not close it. Nil (and PlainRenewals false):
	// a session of Window that the Keeper opens, or with Window 0 the
	// Client's shared session (window 1s). When the service offers no
	// sessions, or its session limit is reached, the Keeper holds by plain
	// renewals and its Logger says why.
	Session *Session
	// Window is the heartbeat window of a session the Keeper opens
	// (SessionConfig.Window); 0: the Client's shared session.
	Window time.Duration
	// TTL is the lease duration of plain renewals' acquires that name
	// none. Default DefaultTTL.
	TTL time.Duration
	// DriftMargin is the fraction of the TTL, or of the window, given up to
	// clock-rate differences. Default 0.1.
	DriftMargin float64
	// Fits, if not nil, vets the window of a session: an error from it
	// makes the Keeper hold by plain renewals (a Session given explicitly
	// is refused with that error). The Elector checks its CancelBefore so.
	Fits func(window time.Duration) error
	// RetryBackoff spaces the retries of a session that failed to open.
	RetryBackoff Backoff
	// ReleaseTimeout bounds a release the Keeper makes on its own (an
	// acquire given up in flight, Close). Default 5s.
	ReleaseTimeout time.Duration
	// Clock is the source of local time. Default SystemClock{}.
	Clock Clock
	// Logger says how the leases are held. Default: no logging.
	Logger *slog.Logger
}

func (cfg KeeperConfig) withDefaults() (KeeperConfig, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.DriftMargin == 0 {
		cfg.DriftMargin = DefaultDriftMargin
	}
	if cfg.DriftMargin < 0.01 || cfg.DriftMargin > 0.5 {
		return cfg, fmt.Errorf("KeeperConfig.DriftMargin %v must be within 0.01 … 0.5", cfg.DriftMargin)
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.RetryBackoff == (Backoff{}) {
		cfg.RetryBackoff = DefaultBackoff
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// NewKeeper returns a Keeper over c. Unless cfg says plain renewals or
// gives a Session, it opens the session (retrying failures other than
// ErrInvalid and ErrDenied until ctx ends) or falls back to plain
// renewals, and logs which.
func NewKeeper(ctx context.Context, c *Client, cfg KeeperConfig) (*Keeper, error) {
	if c == nil {
		return nil, errors.New("client.NewKeeper: Client is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("client.NewKeeper: %w", err)
	}
	k := &Keeper{c: c, cfg: cfg, done: func() {}}
	plain := func(why string) (*Keeper, error) {
		k.cfg.Logger.Info("leasesvc keeper: plain renewals" + why)
		k.why = why
		return k, nil
	}
	switch {
	case cfg.PlainRenewals:
		return plain("")
	case cfg.Session != nil:
		if err := k.fits(cfg.Session.Window()); err != nil {
			return nil, fmt.Errorf("client.NewKeeper: %w", err)
		}
		return k.through(cfg.Session, func() {}), nil
	}
	window := cfg.Window
	if window == 0 {
		window = DefaultSessionWindow
	}
	if err := k.fits(window); err != nil {
		return plain(fmt.Sprintf(" (%v)", err))
	}
	scfg := SessionConfig{Window: cfg.Window, DriftMargin: cfg.DriftMargin, Logger: cfg.Logger, Clock: cfg.Clock}
	for failures := 0; ; failures++ {
		s, done, err := k.open(ctx, scfg)
		switch {
		case err == nil:
			if err := k.fits(s.Window()); err != nil {
				done()
				return plain(fmt.Sprintf(" (%v)", err))
			}
			return k.through(s, done), nil
		case errors.Is(err, ErrSessionsUnsupported):
			return plain(" (the service offers no sessions)")
		case errors.Is(err, ErrSessionLimit):
			return plain(" (the service's session limit is reached)")
		case permanent(err):
			return nil, fmt.Errorf("client.NewKeeper: %w", err)
		}
		k.cfg.Logger.Warn("leasesvc keeper: opening a session failed", "err", err)
		t := cfg.Clock.NewTimer(retryDelay(cfg.RetryBackoff, err, failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client.NewKeeper: %w", ctx.Err())
		case <-t.C():
		}
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

// through makes s the Keeper's session, let go of by done.
func (k *Keeper) through(s *Session, done func()) *Keeper {
	k.sess, k.done = s, done
	k.cfg.Logger.Info("leasesvc keeper: holding " + k.String())
	return k
}

func (k *Keeper) fits(w time.Duration) error {
	if k.cfg.Fits == nil {
		return nil
	}
	return k.cfg.Fits(w)
}

// Mode says how the Keeper holds its leases: "session" or "plain".
func (k *Keeper) Mode() string {
	if k.sess != nil {
		return "session"
	}
	return "plain"
}

// Span is how long a holding lasts unconfirmed: the session's window, or
// the TTL of plain renewals. Tools derive their grace periods from it.
func (k *Keeper) Span() time.Duration {
	if k.sess != nil {
		return k.sess.Window()
	}
	return k.cfg.TTL
}

// DriftMargin is the fraction of Span given up to clock-rate differences.
func (k *Keeper) DriftMargin() float64 { return k.cfg.DriftMargin }

// Close lets go of the Keeper's session, if it opened or shares one: the
// service releases the leases still held through it. With plain renewals
// it does nothing; the holdings' owners release them.
func (k *Keeper) Close() {
	k.once.Do(k.done)
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

// acquirePlain sends one plain acquire. When ctx ends while it is in
// flight, it gives up what the acquire may have taken, so followers need
// not wait for a holding nobody renews to run out, and returns ctx's error.
//
// An acquire that does not wait is not cancelled then: a request cancelled
// in flight may still be decided by the service after anything read to
// find out, so the answer is awaited (up to ReleaseTimeout) and the holding
// it gives released by its token. A waiting acquire is cancelled, so that
// the service stops waiting, and what the lease shows afterwards is
// released if it is this holder's (abandon).
func (k *Keeper) acquirePlain(ctx context.Context, name string, req AcquireRequest) (Lease, error) {
	if req.Wait > 0 {
		l, err := k.c.acquire(ctx, name, req, callOpts{attempts: 1})
		if err != nil && ctx.Err() != nil {
			k.abandon(name, req.Holder)
		}
		return l, err
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	type answer struct {
		l   Lease
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		l, err := k.c.acquire(actx, name, req, callOpts{attempts: 1})
		ch <- answer{l, err}
	}()
	select {
	case a := <-ch:
		return a.l, a.err
	case <-ctx.Done():
	}
	stop := time.AfterFunc(k.cfg.ReleaseTimeout, cancel) // the process's clock, as release's timeout
	defer stop.Stop()
	if a := <-ch; a.err == nil {
		rctx, rcancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
		defer rcancel()
		_, _ = k.c.release(rctx, name, ReleaseRequest{Holder: req.Holder, FencingToken: a.l.FencingToken}, callOpts{attempts: 2})
	} else {
		k.abandon(name, req.Holder) // no answer: what the lease shows
	}
	return Lease{}, ctx.Err()
}

// abandon releases a holding of holder that an acquire cancelled in flight
// may have obtained without the Keeper hearing of it.
func (k *Keeper) abandon(name, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), k.cfg.ReleaseTimeout)
	defer cancel()
	l, err := k.c.Get(ctx, name)
	if err == nil && l.Held && l.Holder == holder {
		_, _ = k.c.release(ctx, name, ReleaseRequest{Holder: holder, FencingToken: l.FencingToken}, callOpts{attempts: 2})
	}
}

// vet applies fits to the window of the Keeper's session, if it holds
// through one.
func (k *Keeper) vet(fits func(window time.Duration) error) error {
	if k.sess == nil {
		return nil
	}
	return fits(k.sess.Window())
}

// Window returns the heartbeat window of the Keeper's session; 0 with
// plain renewals.
func (k *Keeper) Window() time.Duration {
	if k.sess != nil {
		return k.sess.Window()
	}
	return 0
}

// String says how the Keeper holds its leases, for logs and agents:
// "through a session (window 1s)" or "with plain renewals (ttl 30s)".
func (k *Keeper) String() string {
	if k.sess != nil {
		return fmt.Sprintf("through a session (window %v)", k.sess.Window())
	}
	return fmt.Sprintf("with plain renewals (ttl %v)", k.cfg.TTL)
}
