package session

import (
	"context"

	"github.com/leasesvc/leasesvc/lease"
)

// Manager adapts a lease.Manager to Backend.
type Manager struct{ M *lease.Manager }

var _ Backend = Manager{}

func (r Ref) lease() *lease.SessionRef {
	return &lease.SessionRef{Key: r.Key, Epoch: r.Epoch, Window: r.Window}
}

// Acquire acquires through the session ref.
func (m Manager) Acquire(ctx context.Context, ref Ref, req lease.AcquireRequest) (lease.Lease, error) {
	req.Session = ref.lease()
	return m.M.Acquire(ctx, req)
}

// Renew renews through the session ref.
func (m Manager) Renew(ctx context.Context, ref Ref, req lease.RenewRequest) (lease.Lease, error) {
	req.Session = ref.lease()
	return m.M.Renew(ctx, req)
}

// Release releases through the session ref.
func (m Manager) Release(ctx context.Context, ref Ref, req lease.ReleaseRequest) (lease.Lease, error) {
	req.Session = ref.lease()
	return m.M.Release(ctx, req)
}

// Transfer transfers through the session ref.
func (m Manager) Transfer(ctx context.Context, ref Ref, req lease.TransferRequest) (lease.Lease, error) {
	req.Session = ref.lease()
	return m.M.Transfer(ctx, req)
}

// Expire ends a holding of the dead session ref (lease.Manager.ExpireSession).
func (m Manager) Expire(ctx context.Context, ref Ref, req lease.ReleaseRequest) (lease.Lease, error) {
	req.Session = ref.lease()
	return m.M.ExpireSession(ctx, req)
}

// TakeOver moves a holding to ref's epoch (lease.Manager.TakeOver).
func (m Manager) TakeOver(ctx context.Context, ref Ref, req TakeOver) (lease.Lease, error) {
	return m.M.TakeOver(ctx, lease.TakeOverRequest{Name: req.Name, Holder: req.Holder, Principal: req.Principal,
		FencingToken: req.FencingToken, TTL: req.TTL, Session: *ref.lease()})
}

// Get reads a lease with its session members.
func (m Manager) Get(ctx context.Context, name string) (Record, error) {
	l, err := m.M.Get(ctx, name)
	if err != nil {
		return Record{}, err
	}
	return Record{Lease: l, Key: l.SessionKey, Epoch: l.SessionEpoch, Window: l.SessionWindow}, nil
}
