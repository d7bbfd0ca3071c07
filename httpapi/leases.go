package httpapi

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// answer writes the lease, or the problem err maps to.
func (a *api) answer(w http.ResponseWriter, r *http.Request, l lease.Lease, err error) {
	if err != nil {
		a.fail(w, r, a.errorProblem(r, err))
		return
	}
	a.observeOp(r, "ok")
	writeJSON(w, http.StatusOK, "application/json", wire.FromLease(l))
}

// timeout bounds a request's backend work, plus extra (an acquire's wait).
func (a *api) timeout(r *http.Request, extra int64) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), a.cfg.RequestTimeout+millis(max(extra, 0)))
}

// decode reads a request body and lets fields take its fields (one of the
// decoders of request.go), which returns the semantic check of what it
// read. When any field is bad it answers 400 naming every bad one, those
// of that check included, and returns false.
func (a *api) decode(w http.ResponseWriter, r *http.Request, fields func(b *body) (validate func() error)) bool {
	b, p := readBody(w, r)
	if p != nil {
		a.fail(w, r, *p)
		return false
	}
	validate := fields(b)
	if len(b.bad) > 0 {
		b.merge(validate())
		a.fail(w, r, *b.problem())
		return false
	}
	return true
}

func (a *api) acquire(w http.ResponseWriter, r *http.Request, name string) {
	req := lease.AcquireRequest{Name: name, Principal: principalOf(r)}
	if !a.decode(w, r, func(b *body) func() error { return a.decodeAcquire(b, &req, fromREST) }) {
		return
	}
	ctx, cancel := a.timeout(r, req.Wait.Milliseconds())
	defer cancel()
	if req.Wait > 0 {
		if a.stopCtx.Err() != nil {
			a.fail(w, r, shuttingDown())
			return
		}
		release, ok := a.waiting.take(a.callerKey(r))
		if !ok {
			a.fail(w, r, exhausted("waiting acquires", 1))
			return
		}
		defer release()
		// On shutdown the wait ends at once: 503, retry elsewhere.
		wctx, wcancel := context.WithCancelCause(ctx)
		defer wcancel(nil)
		defer context.AfterFunc(a.stopCtx, func() { wcancel(errShuttingDown) })()
		// Past the soft threshold the oldest waits are shed: 503.
		defer a.shedWait(a.callerKey(r), wcancel)()
		ctx = wctx
	}
	l, err := a.m.Acquire(ctx, req)
	if err != nil && errors.Is(context.Cause(ctx), errShuttingDown) {
		a.fail(w, r, shuttingDown())
		return
	}
	if err != nil && errors.Is(context.Cause(ctx), errOverloaded) {
		a.fail(w, r, a.overloadProblem("the waiting acquire was shed"))
		return
	}
	if err != nil {
		a.fail(w, r, a.errorProblem(r, err))
		return
	}
	a.observeOp(r, "ok")
	writeJSON(w, http.StatusOK, "application/json", a.withProof(r.Context(), l))
}

func (a *api) renew(w http.ResponseWriter, r *http.Request, name string) {
	req := lease.RenewRequest{Name: name, Principal: principalOf(r)}
	if !a.decode(w, r, func(b *body) func() error { return a.decodeRenew(b, &req, fromREST) }) {
		return
	}
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	l, err := a.m.Renew(ctx, req)
	a.answer(w, r, l, err)
}

func (a *api) release(w http.ResponseWriter, r *http.Request, name string) {
	req := lease.ReleaseRequest{Name: name, Principal: principalOf(r)}
	if !a.decode(w, r, func(b *body) func() error { return decodeRelease(b, &req, fromREST) }) {
		return
	}
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	l, err := a.m.Release(ctx, req)
	a.answer(w, r, l, err)
}

func (a *api) transfer(w http.ResponseWriter, r *http.Request, name string) {
	req := lease.TransferRequest{Name: name, Principal: principalOf(r)}
	if !a.decode(w, r, func(b *body) func() error { return a.decodeTransfer(b, &req, fromREST) }) {
		return
	}
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	l, err := a.m.Transfer(ctx, req)
	a.answer(w, r, l, err)
}

// clampInt converts a request integer to int, saturating far outside any
// valid range so that validation reports it.
func clampInt(n int64) int {
	return int(max(min(n, math.MaxInt32), math.MinInt32))
}

func (a *api) revoke(w http.ResponseWriter, r *http.Request, name string) {
	req := lease.RevokeRequest{Name: name, Operator: principalOf(r)}
	if !a.decode(w, r, func(b *body) func() error {
		req.Reason = b.str("reason", true)
		tok, hasTok := b.integer("fencingToken", false)
		req.FencingToken = tok
		b.only("reason", "fencingToken")
		if hasTok && tok < 1 { // 0 would mean "any holding" to the Manager: refuse it here
			b.fail("fencingToken", "must be an integer ≥ 1 when given")
		}
		return func() error { return lease.ValidateRevoke(req) }
	}) {
		return
	}
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	l, err := a.m.Revoke(ctx, req)
	if errors.Is(err, lease.ErrLost) {
		a.fail(w, r, problem{status: http.StatusConflict, code: codeLeaseLost,
			detail: "the holding named by fencingToken is not the current live holding; nothing was revoked"})
		return
	}
	a.answer(w, r, l, err)
}

func (a *api) get(w http.ResponseWriter, r *http.Request, name string) {
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	l, err := a.m.Get(ctx, name)
	a.answer(w, r, l, err)
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	// Authenticate first, then check what needs no lease name, the policy
	// on the prefix, and only then the page token: an unauthenticated
	// caller gets 401 and one the policy refuses 403, whatever they sent.
	if !a.authenticate(w, r, "list", "") || a.refuseNew(w, r, "list") {
		return
	}
	q, p := checkQuery(r, "prefix", "pageSize", "pageToken")
	if p != nil {
		a.fail(w, r, *p)
		return
	}
	req := lease.ListRequest{Prefix: q.Get("prefix")}
	if !lease.ValidName(req.Prefix) && req.Prefix != "" { // checked before anything logs it
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "prefix", Description: "must be empty or 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit"}}})
		return
	}
	principal := principalOf(r)
	// With a policy, list what the caller may read: everything under the
	// prefix, or the readable names among them, or nothing (403). A page
	// passes over the others (up to the scan budget) rather than coming
	// back short or empty for them, so paging does not show how many
	// there are or where they sort.
	if p := a.cfg.Policy; p != nil {
		all, some := p.ListScope(principal, auth.Read, req.Prefix)
		if !all && !some {
			a.deny(w, r, "list", principal, req.Prefix, auth.Read)
			return
		}
		if !all {
			req.Keep = func(name string) bool { return p.Allowed(principal, auth.Read, name) }
		}
	}
	if len(a.cfg.Internal) > 0 || sessionRecords(req.Prefix) { // the service's own leases are not listed (docs/contract.md §15)
		readable := req.Keep
		req.Keep = func(name string) bool { return !a.internal(name) && (readable == nil || readable(name)) }
	}
	req.ScanBudget = a.cfg.Limits.ListScanBudget
	inner, ok := a.openPageToken(q.Get("pageToken"), req.Prefix, principal)
	if !ok {
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "pageToken", Description: "is not a token this service gave for this list and caller; start the list again without it"}}})
		return
	}
	req.PageToken = inner
	size, p := pageSizeParam(q) // decimal digits only: "%2B5" is no 5
	if p != nil {
		a.fail(w, r, *p)
		return
	}
	req.PageSize = size
	// A page may come out shorter than pageSize (PageBytes, or the scan
	// budget of lease.List's Keep); nextPageToken still continues it.
	a.writePage(w, r, a.newLister(r, req, size, listChunkBytes, a.account(r)), func(inner string) string { return a.sealPageToken(inner, req.Prefix, principal) })
}

// internal reports whether name is one of the service's own leases, which
// list and the prefix stream leave out (docs/contract.md §15): those of
// Config.Internal (an entry ending in "." is a prefix) and the sessions'
// own records (§14) and the proof keys' (§17).
func (a *api) internal(name string) bool {
	if lease.Reserved(name) {
		return true
	}
	for _, n := range a.cfg.Internal {
		if n == name || strings.HasSuffix(n, ".") && strings.HasPrefix(name, n) {
			return true
		}
	}
	return false
}

// sessionRecords reports whether a list of prefix may meet a session's own
// record.
func sessionRecords(prefix string) bool {
	for _, p := range []string{lease.SessionRecordPrefix, lease.KeyRecordPrefix} {
		if strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p) {
			return true
		}
	}
	return false
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ok"})
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	err := a.ready.check(a.cfg.Limits.ReadyCache, func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), a.cfg.ReadyTimeout)
		defer cancel()
		err := a.m.Ping(ctx)
		if err != nil {
			a.log.WarnContext(ctx, "not ready: backend check failed", "err", err)
		}
		return err
	})
	if err != nil {
		writeProblem(w, r, problem{status: http.StatusServiceUnavailable, code: codeUnavailable, detail: "the backend does not answer", retryAfter: 1})
		return
	}
	writeJSON(w, http.StatusOK, "application/json", map[string]string{"status": "ready"})
}

// fail writes a lease operation's problem and reports its code.
func (a *api) fail(w http.ResponseWriter, r *http.Request, p problem) {
	a.observeOp(r, p.code)
	writeProblem(w, r, p)
}
