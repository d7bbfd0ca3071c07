// Package sweeper announces holdings that ran out with nobody taking over:
// it finds them by expire time and reports one expired event each
// (docs/contract.md §5), within about a second of their expiry.
//
// One service instance sweeps at a time. It is elected by a lease in the
// service's own backend (leasesvc elects its own sweeper), so a crashed
// sweeper is replaced once that lease's TTL runs out. A new sweeper starts
// its scan one sweeper TTL in the past, so expiries during a hand-over are
// announced, possibly twice; duplicates carry the same ce-id
// ({name}/{token}/expired) and consumers drop them.
//
// With Config.RetainFree the sweeper also deletes the leases that have been
// free that long (docs/contract.md §15), through lease.Manager.Delete like
// any caller, so each leaves a tombstone that keeps its fencing token and
// reports a deleted event. It deletes at most Config.Batch a scan, in
// expire-time order, and once caught up scans again every RetainEvery; a
// new sweeper starts that scan from the beginning,
// so it reads every tombstone once (they are small: a name, two integers
// and four times). Names ending in KeepSuffix, leasectl mcp's task
// markers, and the sweeper's own lease are never deleted by retention.
package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// Config configures a Sweeper. The zero value of every field but Manager,
// Scanner, Holder and Emit means its default.
type Config struct {
	// Manager runs the election lease.
	Manager *lease.Manager
	// Scanner finds records by expire time: the same backend as Manager's.
	Scanner backend.ExpiryScanner
	// Holder is this instance's identity in the election.
	Holder string
	// Emit receives each expired event; it must not block.
	Emit func(lease.Event)
	// LeaseName is the election lease. Default "leasesvc.sweeper".
	LeaseName string
	// TTL of the election lease. Default 10s; renewed every TTL/3.
	TTL time.Duration
	// Interval between scans while leading. Default 250ms.
	Interval time.Duration
	// Batch is the most records read per scan query. Default 500.
	Batch int
	// Logger receives the sweeper's log lines. Default slog.Default().
	Logger *slog.Logger
	// RetainFree, if > 0, deletes the leases that have been free (not
	// held, not reserved) at least that long (LEASESVC_RETAIN_FREE). 0, the
	// default, deletes nothing.
	RetainFree time.Duration
	// RecordRetention is how long after its session ended a session's
	// record is removed for good (LEASESVC_SESSION_RECORD_RETENTION,
	// records.go). Zero means DefaultRecordRetention; negative keeps them.
	RecordRetention time.Duration
}

// DefaultLeaseName is the election lease of the sweeper unless
// Config.LeaseName says otherwise.
const DefaultLeaseName = "leasesvc.sweeper"

// KeepSuffix ends the names that retention never deletes: `leasectl mcp`
// marks a finished task with the lease "{task}.done", and a deleted marker
// would let the task be claimed again.
const KeepSuffix = ".done"

// RetentionReason is the reason of the deleted events of retention.
const RetentionReason = "retention"

// Sweeper campaigns for the sweeper lease and, while it holds it, announces
// expired holdings.
type Sweeper struct {
	cfg    Config
	cursor backend.Cursor
	// retained is where the retention scan goes on from; retainedAt is
	// when (local monotonic time) it last reached the end of what was due.
	retained   backend.Cursor
	retainedAt time.Time
	// purged and purgedAt are the same for the session records' removal.
	purged   backend.Cursor
	purgedAt time.Time
	// announced holds the holdings announced within the last lag, by
	// "name/token", with their expire time; the scan looks back that far
	// each time, for writes that commit a little after their decision.
	announced map[announcement]time.Time
	leading   atomic.Bool
}

// Leading reports whether this Sweeper holds the sweeper lease now.
func (s *Sweeper) Leading() bool { return s.leading.Load() }

// announcement identifies one expired holding.
type announcement struct {
	name  string
	token int64
}

// lag is how far behind the backend's clock each scan starts again.
const lag = 2 * time.Second

// New checks cfg and returns a Sweeper.
func New(cfg Config) (*Sweeper, error) {
	switch {
	case cfg.Manager == nil:
		return nil, errors.New("sweeper: Config.Manager is nil")
	case cfg.Scanner == nil:
		return nil, errors.New("sweeper: Config.Scanner is nil")
	case cfg.Holder == "":
		return nil, errors.New("sweeper: Config.Holder is empty")
	case cfg.Emit == nil:
		return nil, errors.New("sweeper: Config.Emit is nil")
	case cfg.TTL < 0 || cfg.Interval < 0 || cfg.Batch < 0 || cfg.RetainFree < 0:
		return nil, errors.New("sweeper: Config.TTL, Interval, Batch and RetainFree must not be negative")
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	if cfg.Batch == 0 {
		cfg.Batch = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RecordRetention == 0 {
		cfg.RecordRetention = DefaultRecordRetention
	}
	if !lease.ValidName(cfg.LeaseName) {
		return nil, fmt.Errorf("sweeper: Config.LeaseName %q is not a lease name", cfg.LeaseName)
	}
	return &Sweeper{cfg: cfg, announced: map[announcement]time.Time{}}, nil
}

// Run campaigns and sweeps until ctx is done; then it releases the
// election lease if it holds it. It returns nil when ctx ends it.
func (s *Sweeper) Run(ctx context.Context) error {
	log := s.cfg.Logger.With("lease", s.cfg.LeaseName, "holder", s.cfg.Holder)
	defer s.leading.Store(false)
	var held lease.Lease // the live holding, FencingToken 0 when not leading
	renewEvery := s.cfg.TTL / 3
	var lastRenew time.Time // local monotonic time of the last successful acquire/renew send
	defer func() {
		if held.FencingToken != 0 {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_, err := s.cfg.Manager.Release(rctx, lease.ReleaseRequest{Name: s.cfg.LeaseName, Holder: s.cfg.Holder, FencingToken: held.FencingToken})
			if err != nil && !errors.Is(err, lease.ErrLost) {
				log.Warn("sweeper: release on stop", "err", err)
			}
		}
	}()
	for {
		wait := s.cfg.Interval
		sent := time.Now()
		switch {
		case held.FencingToken == 0:
			l, err := s.cfg.Manager.Acquire(ctx, lease.AcquireRequest{Name: s.cfg.LeaseName, Holder: s.cfg.Holder, TTL: s.cfg.TTL})
			switch {
			case err == nil:
				held, lastRenew = l, sent
				// Start one TTL back, so a predecessor's last gap is covered.
				s.cursor = backend.Cursor{ExpireTime: l.ServerTime.Add(-s.cfg.TTL - time.Second)}
				s.retained, s.retainedAt = backend.Cursor{}, time.Time{} // retention scans from the start
				log.Info("sweeper: leading", "token", l.FencingToken)
			case errors.Is(err, lease.ErrHeld):
				var h *lease.HeldError
				errors.As(err, &h)
				wait = min(max(h.Lease.Remaining(), s.cfg.Interval), renewEvery) + jitter(s.cfg.Interval)
			case ctx.Err() != nil:
				return nil
			default:
				log.Warn("sweeper: campaign", "err", err)
				wait = renewEvery
			}
		case time.Since(lastRenew) >= renewEvery:
			l, err := s.cfg.Manager.Renew(ctx, lease.RenewRequest{Name: s.cfg.LeaseName, Holder: s.cfg.Holder, FencingToken: held.FencingToken})
			switch {
			case err == nil:
				held, lastRenew = l, sent
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, lease.ErrLost):
				log.Warn("sweeper: lost the sweeper lease", "token", held.FencingToken)
				held = lease.Lease{}
			default:
				log.Warn("sweeper: renew", "err", err)
			}
		}
		// Sweep only within the safe deadline of the holding (docs/contract.md §2).
		if held.FencingToken != 0 && time.Since(lastRenew) < held.TTL*9/10 {
			if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
				log.Warn("sweeper: scan", "err", err)
			}
		} else if held.FencingToken != 0 {
			held = lease.Lease{} // past the safe deadline: stop leading
		}
		s.leading.Store(held.FencingToken != 0)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// sweep announces every holding that ran out since the cursor.
func (s *Sweeper) sweep(ctx context.Context) error {
	now, err := s.cfg.Manager.Get(ctx, s.cfg.LeaseName) // a read of the backend's clock
	if err != nil {
		return fmt.Errorf("read server time: %w", err)
	}
	until := now.ServerTime
	if back := until.Add(-lag); s.cursor.ExpireTime.After(back) {
		s.cursor = backend.Cursor{ExpireTime: back}
	}
	for k, exp := range s.announced {
		if exp.Before(s.cursor.ExpireTime) {
			delete(s.announced, k)
		}
	}
	for {
		recs, err := lease.ScanExpiry(ctx, s.cfg.Scanner, s.cursor, until, s.cfg.Batch)
		if err != nil {
			return fmt.Errorf("scan expiry after %v: %w", s.cursor.ExpireTime, err)
		}
		for i := range recs {
			r := &recs[i]
			s.cursor = backend.Cursor{ExpireTime: r.ExpireTime, Name: r.Name}
			key := announcement{r.Name, r.FencingToken}
			if _, done := s.announced[key]; done || lease.Released(r) || lease.Tombstone(r) || r.Name == s.cfg.LeaseName && r.Holder == s.cfg.Holder ||
				strings.HasPrefix(r.Name, lease.KeyRecordPrefix) { // a proof key's record is no holding of anyone's
				continue
			}
			s.announced[key] = r.ExpireTime
			l := lease.ViewAt(r, until)
			s.cfg.Emit(lease.Event{Type: lease.EventExpired, Lease: l, Time: r.ExpireTime})
		}
		if len(recs) < s.cfg.Batch {
			return errors.Join(s.retain(ctx, until), s.purgeRecords(ctx, until))
		}
	}
}

// RetainEvery is how often the retention scan looks for newly due leases
// once it has caught up; while a scan returns a full batch, the next sweep
// scans on.
const RetainEvery = 10 * time.Second

// freeSince is when the lease of r became free (docs/contract.md §15: not
// held and not reserved): the later of its holding's end and the end of
// its reservation (§8), a transfer's or, when candidates are registered,
// the ReserveWindow after the holding that the best of them may have had.
func freeSince(r *lease.Record) time.Time {
	t := r.ExpireTime
	if r.ReservedFor != "" && r.ReservedUntil.After(t) {
		t = r.ReservedUntil
	}
	if len(r.Candidates) > 0 {
		if end := r.ExpireTime.Add(lease.ReserveWindow); end.After(t) {
			t = end
		}
	}
	return t
}

// retain deletes, with one scan of at most Batch records, the leases that
// have been free for RetainFree at now. The scan finds them by the end of
// their holding; one whose reservation ended later (at most
// lease.MaxTransferReserve later) is not due yet: the next scan, RetainEvery
// on, reads again from it. Delete checks again in its write: a lease taken
// since the scan stays.
func (s *Sweeper) retain(ctx context.Context, now time.Time) error {
	if s.cfg.RetainFree == 0 || !s.retainedAt.IsZero() && time.Since(s.retainedAt) < RetainEvery {
		return nil
	}
	recs, err := lease.ScanExpiry(ctx, s.cfg.Scanner, s.retained, now.Add(-s.cfg.RetainFree), s.cfg.Batch)
	if err != nil {
		return fmt.Errorf("retention scan after %v: %w", s.retained.ExpireTime, err)
	}
	var waiting *backend.Cursor // where the first lease not due yet is read again
	for i := range recs {
		r := &recs[i]
		if !lease.Tombstone(r) && now.Before(freeSince(r).Add(s.cfg.RetainFree)) {
			if waiting == nil {
				c := s.retained
				waiting = &c
			}
			s.retained = backend.Cursor{ExpireTime: r.ExpireTime, Name: r.Name}
			continue
		}
		// Proof keys' records stay: the JWKS lists a key for its own
		// retention after its record ended (docs/contract.md §17).
		if !lease.Tombstone(r) && r.Name != s.cfg.LeaseName && !strings.HasSuffix(r.Name, KeepSuffix) && !strings.HasPrefix(r.Name, lease.KeyRecordPrefix) {
			_, err := s.cfg.Manager.Delete(ctx, lease.DeleteRequest{Name: r.Name, FreeFor: s.cfg.RetainFree, Reason: RetentionReason})
			switch {
			case err == nil:
				s.cfg.Logger.Info("sweeper: deleted a lease free for longer than the retention", "lease", r.Name, "token", r.FencingToken, "retainFree", s.cfg.RetainFree.String())
			case errors.Is(err, lease.ErrHeld), errors.Is(err, lease.ErrReserved), errors.Is(err, lease.ErrNotIdle), errors.Is(err, lease.ErrNotFound):
				// taken, reserved or deleted since the scan: it stays
			default:
				return fmt.Errorf("retention delete of %q: %w", r.Name, err) // the next scan tries it again
			}
		}
		s.retained = backend.Cursor{ExpireTime: r.ExpireTime, Name: r.Name}
	}
	if waiting != nil {
		// Read again from the first lease not due yet, in RetainEvery:
		// what was deleted after it is a tombstone then, passed over.
		s.retained, s.retainedAt = *waiting, time.Now()
		return nil
	}
	if len(recs) < s.cfg.Batch {
		s.retainedAt = time.Now() // caught up: look again in RetainEvery
	}
	return nil
}

func jitter(d time.Duration) time.Duration { return time.Duration(rand.Int64N(int64(d) + 1)) }
