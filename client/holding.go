package client

import (
	"context"
	"sync"
	"time"
)

// Holding is one lease a Keeper holds, from its acquire (Keeper.Hold) until
// it is released, transferred or lost, its deadline passes, or its Keeper
// closes; the Keeper keeps it meanwhile (renews it, or its session does).
// Its deadline (Deadline) is the instant after which its owner must not act
// as the holder; Changed says when the deadline moves and Done when the
// holding ends. Only this package implements Holding: the Keeper hands out
// one of plain renewals or one of a session, and nothing above it needs to
// know which. A Holding is safe for concurrent use.
type Holding interface {
	// Name returns the lease's name.
	Name() string
	// Token returns the holding's fencing token.
	Token() int64
	// Lease returns the lease as the last answer about this holding showed
	// it (its Proof is the acquire's).
	Lease() Lease
	// TTL returns the lease duration the holding's renewals ask for; 0
	// through a session, whose leases the service holds at its own
	// session TTL and ends within the window of the session's end.
	TTL() time.Duration
	// Deadline returns the holding's safe deadline on the Keeper's clock
	// (zero while it must not be led), always a send time plus SafeSpan:
	// with plain renewals the send time of the last acquire or renew that
	// succeeded + the acquire's TTL × (1 − DriftMargin) (docs/contract.md
	// §2); through a session the session's, and until an ack arrives after
	// the holding's answer no later than the acquire's send time + the
	// session lease TTL × (1 − DriftMargin) (docs/contract.md §14, A4).
	Deadline() time.Time
	// Changed returns a channel closed the next time Deadline moves.
	Changed() <-chan struct{}
	// Done returns a channel closed when the holding ends: lost (the
	// service ended it, as a renew's answer or the session says; its
	// deadline passed unconfirmed), released, transferred, or its Keeper
	// closed.
	Done() <-chan struct{}
	// Err says why the holding ended, once Done is closed: an error that
	// matches ErrLost when the service ended it or its deadline passed
	// (then ErrSafeDeadline too), ErrKeeperClosed when its Keeper closed
	// and its release failed, nil when released or transferred.
	Err() error
	// YieldRequests returns a channel on which a preempting candidate's
	// request to step down arrives (docs/contract.md §8): pushed by the
	// session, or answered to one of the Keeper's renewals.
	YieldRequests() <-chan string
	// Renew renews the holding (req.Holder and req.FencingToken default to
	// the holding's), writing req.Checkpoint or req.Metadata if set. With
	// plain renewals it moves the deadline; through a session it writes
	// what req carries (the session's heartbeats move the deadline). A
	// renew answered lease_lost ends the holding. The Keeper renews the
	// holding by itself: call Renew to write.
	Renew(ctx context.Context, req RenewRequest) (Lease, error)
	// Release ends the holding now, writing checkpoint if not nil. The
	// holding ends whatever the answer, except a failure that leaves it
	// unknown (a Session keeps such a release going through its resume).
	Release(ctx context.Context, checkpoint []byte) (Lease, error)
	// Transfer hands the holding over to req.To (req.Holder and
	// req.FencingToken default to the holding's), writing req.Checkpoint if
	// set; on success the holding ends.
	Transfer(ctx context.Context, req TransferRequest) (Lease, error)
	// Fresh makes sure the holding's deadline leaves more than room after
	// an acquire that may have waited: with plain renewals, an acquire
	// answered more than TTL/6 after it was sent is renewed once (a
	// failure other than a loss leaves the acquire's deadline); through a
	// session, it waits for an acknowledged heartbeat. It returns false
	// when the holding was lost meanwhile, or ctx ended (the holding is
	// then released).
	Fresh(ctx context.Context, room time.Duration) bool

	// renewWith is Renew with o for plain renewals' request.
	renewWith(ctx context.Context, req RenewRequest, o callOpts) (Lease, error)
	// unconfirmed is why the deadline passed with nothing to move it.
	unconfirmed() error
	// end ends the holding with err (the Keeper lets go of it), unless it
	// ended.
	end(err error)
}

// holdingBase is what both kinds of Holding share: the lease, its name
// and token, and the Keeper.
type holdingBase struct {
	k     *Keeper
	name  string
	token int64

	mu    sync.Mutex
	lease Lease
}

// Name returns the lease's name.
func (b *holdingBase) Name() string { return b.name }

// Token returns the holding's fencing token.
func (b *holdingBase) Token() int64 { return b.token }

// Lease returns the lease as the last answer about this holding showed it.
func (b *holdingBase) Lease() Lease {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lease
}

// record keeps l, a renew's answer, as the holding's lease; b.mu is held.
func (b *holdingBase) recordLocked(l Lease) {
	l.Proof = b.lease.Proof     // a renew's answer carries none: the holding's is the acquire's
	if len(l.Checkpoint) == 0 { // keep what the holding inherited
		l.Checkpoint, l.CheckpointToken = b.lease.Checkpoint, b.lease.CheckpointToken
	}
	b.lease = l
}

// who defaults a request's holder and fencing token to the holding's.
func (b *holdingBase) who(holder string, token int64) (string, int64) {
	if holder == "" {
		holder = b.Lease().Holder
	}
	if token == 0 {
		token = b.token
	}
	return holder, token
}
