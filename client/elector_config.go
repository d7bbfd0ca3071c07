package client

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"time"
	"unicode"
)

// ElectorConfig configures an Elector. Every field but OnStartedLeading has
// a default; NewElector checks them all and names the field at fault.
type ElectorConfig struct {
	// Holder is this participant's identity, 1–256 printable characters,
	// unique among the participants. Default "{hostname}-{pid}".
	Holder string
	// TTL is the lease duration asked for, whole milliseconds. Default 30s.
	TTL time.Duration
	// RenewInterval is how long after a successful acquire or renew the
	// next renew is sent (minus up to RenewJitter of it). Default TTL/3.
	// RenewInterval + CancelBefore must stay below TTL × (1 − DriftMargin),
	// so that a renew has time to succeed before leadership is given up.
	RenewInterval time.Duration
	// RenewJitter is the fraction of RenewInterval, 0 … 0.5, by which each
	// renew comes early at random, so that leaders do not renew in lockstep.
	// Default 0.1.
	RenewJitter float64
	// DriftMargin is the fraction of the TTL given up to the difference
	// between the local clock's rate and the backend's, 0.01 … 0.5. The safe
	// deadline of a holding is (local time when the acquire or renew that
	// last succeeded was sent) + TTL × (1 − DriftMargin). Default 0.1.
	DriftMargin float64
	// CancelBefore is how long before the safe deadline the leading ctx is
	// cancelled when renewals keep failing, so that work still has that
	// long to stop before the deadline (leasectl run uses it for its
	// SIGTERM → SIGKILL grace). Default min(250ms, TTL/10), so that a timer
	// or goroutine that wakes late cannot carry leadership past the safe
	// deadline (the Python and TypeScript SDKs use the same default); less
	// when RenewInterval leaves less room below the safe deadline.
	CancelBefore time.Duration
	// Wait is how long one acquire waits on the service (waitMs) for the
	// holding of another to end, 0 … 60s; a follower takes over as soon as
	// the service sees the lease free, without polling. Default 30s.
	// Negative disables waiting: followers poll every RenewInterval.
	Wait time.Duration
	// RetryBackoff spaces the retries of a failed acquire or renew.
	// Default: Initial min(100ms, TTL/30), Max min(5s, TTL/6), Multiplier 2.
	RetryBackoff Backoff
	// ReleaseTimeout bounds the release sent on a graceful stop. Default
	// 5s.
	ReleaseTimeout time.Duration
	// Metadata, if not nil, is the JSON object attached to the lease on
	// every acquire.
	Metadata json.RawMessage
	// Clock is the source of local time. Default SystemClock{}.
	Clock Clock
	// Logger receives a line for every gain and loss of leadership and
	// every failed call, and says how the lease is held. Default: no
	// logging, but for one line on stderr saying how the lease is held
	// (through a session, or with plain renewals and why), once per
	// process for each change of mode.
	Logger *slog.Logger

	// OnStartedLeading is called in a goroutine of its own when this
	// Elector becomes leader; required. Its ctx is cancelled when
	// leadership ends: at once on lease_lost, at the safe deadline (minus
	// CancelBefore) when renewals fail, however the service fails, and when
	// Run's ctx is cancelled, and when the Elector steps down
	// (OnYieldRequested) or transfers the lease (Transfer).
	// context.Cause(ctx) says why, TokenFromContext(ctx) gives the fencing
	// token of the term and CheckpointFromContext(ctx) the checkpoint it
	// inherited (docs/contract.md §8). Stop all
	// leader work when ctx is done, and return. Returning while still
	// leading resigns: the lease is released and Run returns nil.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading, if set, is called after every term of leadership,
	// whatever ended it, once OnStartedLeading has returned (and, on a
	// graceful stop, after the release).
	OnStoppedLeading func()
	// OnSafeDeadline, if set, is called from Run's goroutine when a term
	// begins, before OnStartedLeading, and after every successful renew,
	// with the term's safe deadline: the local time (with its monotonic
	// reading) when the acquire or renew that succeeded was sent, plus
	// TTL × (1 − DriftMargin). Nothing may act on the leadership after it.
	// A watchdog outside the process can enforce it when the process
	// cannot (leasectl run's guard kills its command's process tree then,
	// even when leasectl is frozen). It must not block.
	OnSafeDeadline func(deadline time.Time)
	// OnNewLeader, if set, is called from Run's goroutine whenever the
	// holder seen leading changes, this Elector's own holder included. It
	// must not block.
	OnNewLeader func(holder string)

	// Priority, 0 … 1000, ranks this Elector among the candidates waiting
	// for the lease (docs/contract.md §8): when a holding ends, the lease
	// is reserved for a few seconds for the best waiting candidate
	// (highest priority, then the one waiting longest). Every acquire
	// carries it and the holding records it. With Priority > 0 or Preempt,
	// the Elector's waiting acquires register it as a candidate with the
	// service; with neither (the default) it sends no priority and waits
	// unranked, as before succession existed. Default 0.
	Priority int
	// Preempt makes the Elector's waiting acquires ask a holder whose
	// holding has a strictly lower priority to step down (see
	// OnYieldRequested). It needs Wait > 0. Nothing is taken by force: the
	// Elector leads once the holder has released, or its holding expired.
	Preempt bool
	// OnYieldRequested, if set, is called in a goroutine of its own, at
	// most once per term, when a renewal answers that a preempting
	// candidate asks this leader to step down; yieldTo names it. Its ctx
	// is the leading ctx, still live: the callback may save progress with
	// Checkpoint or SetCheckpoint. When it returns, the Elector steps down:
	// it cancels the leading ctx with a cause that matches ErrYielded,
	// waits for OnStartedLeading to return (renewing meanwhile), releases
	// the lease with the latest checkpoint (the preempting candidate gets
	// it, with the next fencing token), calls OnStoppedLeading and
	// campaigns again as a follower. Left nil, the Elector steps down the
	// same way at once. A callback that needs time to reach a safe point
	// may take it: the term lasts until it returns, or until its ctx ends.
	OnYieldRequested func(ctx context.Context, yieldTo string)

	// Session, if not nil, is the session the Elector holds the lease
	// through (docs/contract.md §14); several Electors may share one. Nil
	// means the Client's shared session, opened (with this Elector's
	// DriftMargin, Clock and Logger and the default window of 1s) when the
	// first Elector runs and closed when the last one stops. Through a
	// session the service renews the lease itself and ends it within the
	// session's window of a crash; each term ends at the session's
	// deadline (Session.Deadline, minus CancelBefore) whatever the socket
	// says, and checkpoints, transfers and the release travel over the
	// session. Against a service without sessions the Elector falls back to
	// plain renewals. The Logger says which it uses.
	Session *Session
	// PlainRenewals makes the Elector hold the lease with plain renewals
	// (acquire, then renew every RenewInterval) rather than through a
	// session.
	PlainRenewals bool
	// Keeper, if not nil, holds the lease (NewKeeper); Session and
	// PlainRenewals are then not read, the Keeper's DriftMargin and Clock
	// make the holdings' deadlines, and Run does not close it. Several
	// Electors may share one Keeper. Nil: Run builds one from Session,
	// PlainRenewals, TTL, DriftMargin, Clock and Logger, and closes it when
	// it returns.
	Keeper *Keeper
}

// Defaults of ElectorConfig.
const (
	// DefaultTTL is the lease duration an Elector asks for (docs/contract.md §7).
	DefaultTTL = 30 * time.Second
	// DefaultDriftMargin is the fraction of the TTL given up to clock-rate
	// differences: the safe deadline comes at 90% of the TTL.
	DefaultDriftMargin = 0.1
	// DefaultRenewJitter is the fraction of RenewInterval by which renewals
	// come early at random.
	DefaultRenewJitter = 0.1
	// DefaultCancelBefore caps the default CancelBefore, min(250ms, TTL/10).
	DefaultCancelBefore = 250 * time.Millisecond
	// DefaultWait is how long one acquire waits on the service (waitMs).
	DefaultWait = 30 * time.Second
	// MaxPriority is the highest ElectorConfig.Priority (and
	// AcquireRequest.Priority) the service accepts (docs/contract.md §8).
	MaxPriority = 1000
	// MaxCheckpointBytes is the largest checkpoint, as a compact JSON
	// object, the service stores (docs/contract.md §8).
	MaxCheckpointBytes = 16 << 10
	// maxWait is the service's limit on waitMs.
	maxWait = 60 * time.Second
)

// nameRE is the rule of docs/contract.md §1 for lease names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidName reports whether name is a valid lease name (docs/contract.md §1): 1–128
// characters of [A-Za-z0-9._-], starting with a letter or digit.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// validHolder reports whether holder is 1–256 printable characters.
func validHolder(holder string) bool {
	n := 0
	for _, r := range holder {
		if !unicode.IsPrint(r) {
			return false
		}
		n++
	}
	return n >= 1 && n <= 256
}

// DefaultHolder returns "{hostname}-{pid}", the default identity.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// withDefaults fills the defaults into a copy of cfg and checks it.
func (cfg ElectorConfig) withDefaults() (ElectorConfig, error) {
	if cfg.OnStartedLeading == nil {
		return cfg, fmt.Errorf("ElectorConfig.OnStartedLeading is required")
	}
	if cfg.Holder == "" {
		cfg.Holder = DefaultHolder()
	}
	if !validHolder(cfg.Holder) {
		return cfg, fmt.Errorf("ElectorConfig.Holder %q must be 1–256 printable characters", cfg.Holder)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < time.Millisecond || cfg.TTL%time.Millisecond != 0 {
		return cfg, fmt.Errorf("ElectorConfig.TTL %v must be a positive whole number of milliseconds", cfg.TTL)
	}
	if cfg.DriftMargin == 0 {
		cfg.DriftMargin = DefaultDriftMargin
	}
	if cfg.DriftMargin < 0.01 || cfg.DriftMargin > 0.5 {
		return cfg, fmt.Errorf("ElectorConfig.DriftMargin %v must be within 0.01 … 0.5", cfg.DriftMargin)
	}
	if cfg.RenewInterval == 0 {
		cfg.RenewInterval = cfg.TTL / 3
	}
	if cfg.RenewJitter == 0 {
		cfg.RenewJitter = DefaultRenewJitter
	}
	if cfg.RenewJitter < 0 || cfg.RenewJitter > 0.5 {
		return cfg, fmt.Errorf("ElectorConfig.RenewJitter %v must be within 0 … 0.5", cfg.RenewJitter)
	}
	if cfg.CancelBefore < 0 {
		return cfg, fmt.Errorf("ElectorConfig.CancelBefore %v must not be negative", cfg.CancelBefore)
	}
	safe := SafeSpan(cfg.TTL, cfg.DriftMargin)
	if cfg.CancelBefore == 0 {
		cfg.CancelBefore = min(DefaultCancelBefore, cfg.TTL/10, max(0, safe-cfg.RenewInterval-time.Millisecond))
	}
	if cfg.RenewInterval <= 0 || cfg.RenewInterval+cfg.CancelBefore >= safe {
		return cfg, fmt.Errorf("ElectorConfig.RenewInterval %v must be positive and, with CancelBefore %v, below TTL × (1 − DriftMargin) = %v",
			cfg.RenewInterval, cfg.CancelBefore, safe)
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Wait > maxWait || (cfg.Wait > 0 && cfg.Wait%time.Millisecond != 0) {
		return cfg, fmt.Errorf("ElectorConfig.Wait %v must be whole milliseconds, at most %v", cfg.Wait, maxWait)
	}
	if cfg.RetryBackoff == (Backoff{}) {
		initial := max(time.Millisecond, min(100*time.Millisecond, cfg.TTL/30))
		cfg.RetryBackoff = Backoff{Initial: initial, Max: max(initial, min(5*time.Second, cfg.TTL/6)), Multiplier: 2}
	}
	var err error
	if cfg.RetryBackoff, err = cfg.RetryBackoff.withDefaults("ElectorConfig.RetryBackoff"); err != nil {
		return cfg, err
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.ReleaseTimeout < 0 {
		return cfg, fmt.Errorf("ElectorConfig.ReleaseTimeout %v must not be negative", cfg.ReleaseTimeout)
	}
	if cfg.Metadata != nil && !json.Valid(cfg.Metadata) {
		return cfg, fmt.Errorf("ElectorConfig.Metadata is not valid JSON")
	}
	if cfg.Priority < 0 || cfg.Priority > MaxPriority {
		return cfg, fmt.Errorf("ElectorConfig.Priority %d must be within 0 … %d", cfg.Priority, MaxPriority)
	}
	if cfg.Preempt && cfg.Wait < 0 {
		return cfg, fmt.Errorf("ElectorConfig.Preempt needs waiting acquires: ElectorConfig.Wait must not be negative")
	}
	if cfg.Session != nil && cfg.PlainRenewals {
		return cfg, fmt.Errorf("ElectorConfig.Session and ElectorConfig.PlainRenewals exclude each other")
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// SafeSpan is how long after the send of a confirmation (an acquire or
// renew that succeeded, an acknowledged heartbeat) a holding may be acted
// on: span (a TTL or a session window) × (1 − margin). Every safe
// deadline of this package is a send time plus SafeSpan.
func SafeSpan(span time.Duration, margin float64) time.Duration {
	return time.Duration(float64(span) * (1 - margin))
}
