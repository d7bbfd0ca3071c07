package httpapi

import (
	"github.com/leasesvc/leasesvc/lease"
)

// A lease operation (acquire, renew, release, transfer) arrives as a REST
// body, whose lease name is in the path, or as a session message
// (docs/contract.md §14), which names the lease and carries its type and
// id and whose TTL is the session's. Each operation has one decoder here,
// which both use, so that every rule about its fields is written once;
// each returns the semantic check (lease's Validate…) of what it read,
// which the caller runs on the request as it will be made.

// source says where a lease request came from.
type source int

const (
	fromREST   source = iota // a POST body; the name is in the path
	fromSocket               // a session message: type, id and name in it
)

// name reads the lease name of a session message into *name (REST takes it
// from the path).
func (src source) name(b *body, name *string) {
	if src == fromSocket {
		*name = b.str("name", true)
	}
}

// only reports every field other than the operation's own (and, in a
// session message, type, id and name).
func (src source) only(b *body, own ...string) {
	if src == fromSocket {
		own = append(own, "type", "id", "name")
	}
	b.only(own...)
}

// decodeAcquire reads an acquire into req: holder, ttlMs (over REST only;
// a session's leases live by its TTL), metadata, waitMs, priority (whose
// presence makes the caller a candidate) and preempt.
func (a *api) decodeAcquire(b *body, req *lease.AcquireRequest, src source) (validate func() error) {
	src.name(b, &req.Name)
	req.Holder = b.str("holder", true)
	own := []string{"holder", "metadata", "waitMs", "priority", "preempt"}
	if src == fromREST {
		ttl, _ := b.integer("ttlMs", true)
		req.TTL = millis(ttl)
		own = append(own, "ttlMs")
	}
	req.Metadata = b.object("metadata")
	wait, _ := b.integer("waitMs", false)
	req.Wait = millis(wait)
	prio, hasPrio := b.integer("priority", false)
	req.Priority, req.Candidate = clampInt(prio), hasPrio
	req.Preempt = b.boolean("preempt")
	src.only(b, own...)
	return func() error { return a.m.ValidateAcquire(*req) }
}

// decodeRenew reads a renew into req: holder, fencingToken, ttlMs (over
// REST only, and never 0, which would mean "keep" to the Manager),
// metadata and checkpoint.
func (a *api) decodeRenew(b *body, req *lease.RenewRequest, src source) (validate func() error) {
	src.name(b, &req.Name)
	req.Holder = b.str("holder", true)
	req.FencingToken, _ = b.integer("fencingToken", true)
	own := []string{"holder", "fencingToken", "metadata", "checkpoint"}
	var ttl int64
	var hasTTL bool
	if src == fromREST {
		ttl, hasTTL = b.integer("ttlMs", false)
		req.TTL = millis(ttl)
		own = append(own, "ttlMs")
	}
	req.Metadata = b.object("metadata")
	req.Checkpoint = b.object("checkpoint")
	src.only(b, own...)
	if hasTTL && ttl == 0 { // 0 would mean "keep" to the Manager: refuse it here
		b.fail("ttlMs", "must be between %d and %d", a.m.Config().MinTTL.Milliseconds(), a.m.Config().MaxTTL.Milliseconds())
	}
	return func() error { return a.m.ValidateRenew(*req) }
}

// decodeRelease reads a release into req: holder, fencingToken and
// checkpoint.
func decodeRelease(b *body, req *lease.ReleaseRequest, src source) (validate func() error) {
	src.name(b, &req.Name)
	req.Holder = b.str("holder", true)
	req.FencingToken, _ = b.integer("fencingToken", true)
	req.Checkpoint = b.object("checkpoint")
	src.only(b, "holder", "fencingToken", "checkpoint")
	return func() error { return lease.ValidateRelease(*req) }
}

// decodeTransfer reads a transfer into req: holder, fencingToken, to,
// checkpoint, reserveMs (never below 1, since 0 would mean the default to
// the Manager) and toPrincipal (an authenticated principal, so only with
// authentication on).
func (a *api) decodeTransfer(b *body, req *lease.TransferRequest, src source) (validate func() error) {
	src.name(b, &req.Name)
	req.Holder = b.str("holder", true)
	req.FencingToken, _ = b.integer("fencingToken", true)
	req.To = b.str("to", true)
	req.Checkpoint = b.object("checkpoint")
	ms, hasMs := b.integer("reserveMs", false)
	req.Reserve = millis(ms)
	req.ToPrincipal = b.str("toPrincipal", false)
	src.only(b, "holder", "fencingToken", "to", "checkpoint", "reserveMs", "toPrincipal")
	if hasMs && ms < 1 { // 0 would mean the default to the Manager: refuse it here
		b.fail("reserveMs", "must be between 1 and %d", lease.MaxTransferReserve.Milliseconds())
	}
	if _, has := b.fields["toPrincipal"]; has && (req.ToPrincipal == "" || a.cfg.Authenticator == nil) {
		// "" would mean the caller's own; without authentication every
		// caller is the anonymous principal and there is none to name.
		b.fail("toPrincipal", "must name an authenticated principal; it needs authentication on (LEASESVC_AUTH)")
	}
	return func() error { return lease.ValidateTransfer(*req) }
}
