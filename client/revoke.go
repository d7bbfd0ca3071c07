package client

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// RevokeRequest asks an operator's revocation of a holding.
type RevokeRequest struct {
	// Reason says why, 1–512 printable characters; required. The service
	// keeps it on the lease (RevokeReason) and sends it with the revoked
	// event.
	Reason string
	// FencingToken, if positive, revokes only the holding with this token:
	// when it is not the current live holding the service answers
	// lease_lost (ErrLost) and changes nothing. 0 revokes whatever holding
	// is live.
	FencingToken int64
}

// Revoke ends the live holding of the lease now, as an operator: the
// holder's next renew is lease_lost (an Elector stops leading at once), the
// next acquire gets token + 1, and the service publishes a revoked event.
// The answer is the lease after it: Held false, RevokedBy and RevokeReason
// set. A lease that is not held is answered unchanged (nothing to revoke).
// The caller needs the service's admin verb on the lease.
//
// Errors: ErrNotFound when the lease never existed; ErrLost when
// req.FencingToken is set and is not the current live holding;
// ErrPermissionDenied without the admin verb; ErrInvalid for a missing or
// bad reason.
//
// Unlike the other calls, a revoke is not idempotent: sent again after its
// answer was lost it could end a newer holding (without FencingToken) or
// answer lease_lost for the holding it did end (with it). So Revoke retries
// only failures that show the service did not act: 429, and connections
// that could not be made. Give FencingToken to revoke a holding you have
// seen (Get), never its successor.
func (c *Client) Revoke(ctx context.Context, name string, req RevokeRequest) (Lease, error) {
	body := struct {
		Reason       string `json:"reason"`
		FencingToken int64  `json:"fencingToken,omitempty"`
	}{req.Reason, req.FencingToken}
	var l Lease
	err := c.call(ctx, "revoke", name, http.MethodPost, leasePath(name, ":revoke"), body, &l, callOpts{notIdempotent: true})
	return l, err
}

// notActedOn reports whether a transient failure shows that the service
// did not act on the request: a rate-limit refusal (the limiter answers
// before anything is done), or a connection that was never made.
func notActedOn(e *Error) bool {
	if e.sub == ErrRateLimited {
		return true
	}
	var op *net.OpError
	return e.Status == 0 && errors.As(e.Err, &op) && op.Op == "dial"
}
