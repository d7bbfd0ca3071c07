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

// ElectorConfig configures an Elector: who campaigns and what it does
// while it leads. How the lease is held (TTL, renewals, session, clock,
// retries) is its Keeper's (KeeperConfig). Every field but
// Callbacks.OnStartedLeading has a default; NewElector checks them all and
// names the field at fault.
type ElectorConfig struct {
	// Holder is this participant's identity, 1–256 printable characters,
	// unique among the participants. Default "{hostname}-{pid}".
	Holder string
	// CancelBefore is how long before the holding's safe deadline the
	// leading ctx is cancelled when nothing confirms the holding any more
	// (StopAt), so that work still has that long to stop before the
	// deadline (leasectl run uses it for its SIGTERM → SIGKILL grace). It
	// must fit the Keeper's span (FitCancelBefore: below SafeSpan(span,
	// DriftMargin) − span/2), else NewElector (or Run, for an Elector of
	// Client.NewElector) fails with ErrInvalid; it is never capped. Default
	// min(250ms, span/10) (DefaultCancelBeforeFor), so that a timer or
	// goroutine that wakes late cannot carry leadership past the safe
	// deadline (the Python and TypeScript SDKs use the same default).
	CancelBefore time.Duration
	// Wait is how long one acquire waits on the service (waitMs) for the
	// holding of another to end, 0 … 60s; a follower takes over as soon as
	// the service sees the lease free, without polling. Default 30s.
	// Negative disables waiting: followers poll every RenewInterval of the
	// Keeper.
	Wait time.Duration
	// Metadata, if not nil, is the JSON object attached to the lease on
	// every acquire.
	Metadata json.RawMessage
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
	// LeaderCallbacks.OnYieldRequested). It needs Wait > 0. Nothing is
	// taken by force: the Elector leads once the holder has released, or
	// its holding expired.
	Preempt bool
	// Callbacks are called as leadership begins, moves and ends.
	Callbacks LeaderCallbacks
	// Logger receives a line for every gain and loss of leadership and
	// every failed call. Default: no logging (an Elector of
	// Client.NewElector, whose Keeper it builds, then writes one line on
	// stderr saying how the lease is held, once per process for each
	// change of mode).
	Logger *slog.Logger
}

// LeaderCallbacks are an Elector's callbacks, as client-go's
// leaderelection.LeaderCallbacks. OnStartedLeading is required.
type LeaderCallbacks struct {
	// OnStartedLeading is called in a goroutine of its own when this
	// Elector becomes leader; required. Its ctx is cancelled when
	// leadership ends: at once on lease_lost (also when the service ended
	// the Keeper's session), at the stop time (StopAt: the safe deadline
	// less CancelBefore) when nothing confirms the holding any more,
	// however the service fails, and when Run's ctx is cancelled, and when
	// the Elector steps down (OnYieldRequested) or transfers the lease
	// (Transfer). context.Cause(ctx) says why, TokenFromContext(ctx) gives
	// the fencing token of the term and CheckpointFromContext(ctx) the
	// checkpoint it inherited (docs/contract.md §8). Stop all leader work
	// when ctx is done, and return. Returning while still leading resigns:
	// the lease is released and Run returns nil.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading, if set, is called after every term of leadership,
	// whatever ended it, once OnStartedLeading has returned (and, on a
	// graceful stop, after the release).
	OnStoppedLeading func()
	// OnNewLeader, if set, is called from Run's goroutine whenever the
	// holder seen leading changes, this Elector's own holder included. It
	// must not block.
	OnNewLeader func(holder string)
	// OnSafeDeadline, if set, is called from Run's goroutine when a term
	// begins, before OnStartedLeading, and whenever the term's safe
	// deadline moves (a renew of the Keeper's, an acknowledged heartbeat),
	// with that deadline (Holding.Deadline, with its monotonic reading).
	// Nothing may act on the leadership after it. A watchdog outside the
	// process can enforce it when the process cannot (leasectl run's guard
	// kills its command's process tree then, even when leasectl is
	// frozen). It must not block.
	OnSafeDeadline func(deadline time.Time)
	// OnYieldRequested, if set, is called in a goroutine of its own, at
	// most once per term, when a preempting candidate asks this leader to
	// step down; yieldTo names it. Its ctx is the leading ctx, still live:
	// the callback may save progress with Checkpoint or SetCheckpoint.
	// When it returns, the Elector steps down: it cancels the leading ctx
	// with a cause that matches ErrYielded, waits for OnStartedLeading to
	// return, releases the lease with the latest checkpoint (the
	// preempting candidate gets it, with the next fencing token), calls
	// OnStoppedLeading and campaigns again as a follower. Left nil, the
	// Elector steps down the same way at once. A callback that needs time
	// to reach a safe point may take it: the term lasts until it returns,
	// or until its ctx ends.
	OnYieldRequested func(ctx context.Context, yieldTo string)
}

// Defaults of ElectorConfig.
const (
	// DefaultTTL is the lease duration a Keeper's plain renewals ask for (docs/contract.md §7).
	DefaultTTL = 30 * time.Second
	// DefaultDriftMargin is the fraction of the TTL given up to clock-rate
	// differences: the safe deadline comes at 90% of the TTL.
	DefaultDriftMargin = 0.1
	// DefaultRenewJitter is the fraction of RenewInterval by which renewals
	// come early at random.
	DefaultRenewJitter = 0.1
	// DefaultCancelBefore caps the default CancelBefore, min(250ms, span/10).
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

// Validate checks cfg as NewElector does, but for CancelBefore against
// a span (FitCancelBefore, which needs the Keeper's), naming the field at
// fault.
func (cfg ElectorConfig) Validate() error {
	_, err := cfg.withDefaults()
	return err
}

// withDefaults fills the defaults into a copy of cfg and checks it; the
// CancelBefore default and check need the Keeper's span (Elector.fit).
func (cfg ElectorConfig) withDefaults() (ElectorConfig, error) {
	if cfg.Callbacks.OnStartedLeading == nil {
		return cfg, fmt.Errorf("ElectorConfig.Callbacks.OnStartedLeading is required")
	}
	if cfg.Holder == "" {
		cfg.Holder = DefaultHolder()
	}
	if !validHolder(cfg.Holder) {
		return cfg, fmt.Errorf("ElectorConfig.Holder %q must be 1–256 printable characters", cfg.Holder)
	}
	if cfg.CancelBefore < 0 {
		return cfg, fmt.Errorf("%w: ElectorConfig.CancelBefore %v must not be negative", ErrInvalid, cfg.CancelBefore)
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Wait > maxWait || (cfg.Wait > 0 && cfg.Wait%time.Millisecond != 0) {
		return cfg, fmt.Errorf("ElectorConfig.Wait %v must be whole milliseconds, at most %v", cfg.Wait, maxWait)
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}
