package leasemcp

import (
	"context"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// acquireLease acquires name through the session, if the server has one,
// else with a plain acquire.
func (s *Server) acquireLease(ctx context.Context, name string, req client.AcquireRequest) (client.Lease, error) {
	if s.cfg.Session != nil {
		return s.cfg.Session.Acquire(ctx, name, req)
	}
	return s.c.Acquire(ctx, name, req)
}

// renewLease writes a checkpoint (or renews) through the session, if any.
func (s *Server) renewLease(ctx context.Context, name string, req client.RenewRequest) (client.Lease, error) {
	if s.cfg.Session != nil {
		return s.cfg.Session.Renew(ctx, name, req)
	}
	return s.c.Renew(ctx, name, req)
}

// releaseLease releases the holding token of name through the session, if
// any.
func (s *Server) releaseLease(ctx context.Context, name string, token int64) error {
	var err error
	if s.cfg.Session != nil {
		_, err = s.cfg.Session.ReleaseWith(ctx, name, client.ReleaseRequest{Holder: s.cfg.Holder, FencingToken: token})
	} else {
		_, err = s.c.Release(ctx, name, s.cfg.Holder, token)
	}
	return err
}

// safeUntil is the deadline of a holding until its renewer confirms it:
// the session's, or that of the acquire sent at sent with ttl.
func (s *Server) safeUntil(ttl time.Duration, sent time.Time) time.Time {
	if s.cfg.Session != nil {
		return s.cfg.Session.Deadline()
	}
	return sent.Add(time.Duration(float64(ttl) * (1 - driftMargin)))
}
