package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/leasesvc/leasesvc/internal/overload"
)

// errOverloaded ends what the overload manager sheds (docs/contract.md
// §16).
var errOverloaded = errors.New("the instance is overloaded")

// overloadProblem is the answer to work refused or shed by the overload
// manager: 503 with Retry-After, so that the client retries, on another
// instance if there is one.
func (a *api) overloadProblem(what string) problem {
	soft, _ := a.cfg.Overload.Thresholds()
	return problem{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1,
		detail: fmt.Sprintf("%s: the instance is overloaded (%d bytes of memory in use, past LEASESVC_OVERLOAD_SOFT %d); retry (another instance may answer)",
			what, a.cfg.Overload.InUseBytes(), soft)}
}

// refuseNew answers new work (an acquire, a read, a stream, a session
// upgrade) 503 while the instance is past the overload manager's soft
// threshold, and reports whether it did. What keeps a holding (renew,
// release, transfer, heartbeats) is never refused here.
func (a *api) refuseNew(w http.ResponseWriter, r *http.Request, op string) bool {
	if a.cfg.Overload.Level() < overload.Soft {
		return false
	}
	p := a.overloadProblem("new work is refused")
	a.cfg.Overload.Refused(op)
	a.cfg.Audit.Overload(r.Context(), "overload_refuse", codeUnavailable, principalOf(r), op+": "+p.detail)
	a.fail(w, r, p)
	return true
}

// shedWait registers a waiting acquire of caller with the overload
// manager: shedding it cancels its context with errOverloaded. The
// returned function unregisters it.
func (a *api) shedWait(caller string, cancel context.CancelCauseFunc) func() {
	return a.cfg.Overload.Register(caller, overload.KindWait, func(overload.Level) { cancel(errOverloaded) })
}
