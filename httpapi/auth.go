package httpapi

import (
	"errors"
	"math"
	"net"
	"net/http"

	"github.com/leasesvc/leasesvc/auth"
)

// Problem codes of authentication, authorization and rate limiting.
const (
	codeUnauthenticated   = "unauthenticated"
	codePermissionDenied  = "permission_denied"
	codeResourceExhausted = "resource_exhausted"
)

// verbOf is the policy verb each lease operation needs.
var verbOf = map[string]auth.Verb{
	"get": auth.Read, "list": auth.Read, "watch": auth.Read,
	"acquire": auth.Acquire, "renew": auth.Acquire, "release": auth.Acquire, "transfer": auth.Acquire,
	"revoke": auth.Admin, "delete": auth.Delete,
}

// admit authenticates the request, applies the caller's rate limit and, for
// an operation on one lease (name != ""), checks the policy: authenticate,
// then authorize.
func (a *api) admit(w http.ResponseWriter, r *http.Request, op, name string) bool {
	return a.authenticate(w, r, op, name) && a.authorize(w, r, op, name)
}

// authenticate identifies the caller and applies its rate limit. It answers
// the refusal itself and returns false, or records the principal for the
// handler and returns true. It comes before anything of the request is
// checked, so that a caller without credentials learns nothing from a 400
// (name is "" when the path's name is not valid: the audit line omits it).
// With authentication off the caller is the anonymous principal "" and the
// rate limit applies per client address.
func (a *api) authenticate(w http.ResponseWriter, r *http.Request, op, name string) bool {
	info := requestInfo(r)
	principal := ""
	if a.cfg.Authenticator != nil {
		p, err := a.cfg.Authenticator.Authenticate(r)
		if err != nil {
			if errors.Is(err, auth.ErrUnavailable) {
				a.log.WarnContext(r.Context(), "cannot verify credentials now", "err", err)
				a.fail(w, r, problem{status: http.StatusServiceUnavailable, code: codeUnavailable,
					detail: "credentials cannot be verified right now; retry later", retryAfter: 1})
				return false
			}
			a.cfg.Audit.Refused(r.Context(), op, codeUnauthenticated, "", name, err.Error())
			w.Header().Set("WWW-Authenticate", `Bearer realm="leasesvc"`)
			detail := "missing or invalid credentials: send Authorization: Bearer <token>"
			if errors.Is(err, auth.ErrMalformedHeader) {
				detail = "the Authorization header contains a control character (a tab, a line break or another): send Authorization: Bearer <token> on one line, with one space"
			}
			a.fail(w, r, problem{status: http.StatusUnauthorized, code: codeUnauthenticated, detail: detail})
			return false
		}
		principal = p
	}
	if info != nil {
		info.principal = principal
	}
	key := principal
	if a.cfg.Authenticator == nil {
		key = clientAddr(r)
	}
	if ok, retry := a.cfg.Limiter.Allow(key); !ok {
		a.fail(w, r, problem{status: http.StatusTooManyRequests, code: codeResourceExhausted,
			detail:     "rate limit exceeded for this caller; slow down",
			retryAfter: max(int(math.Ceil(retry.Seconds())), 1)})
		return false
	}
	return true
}

// authorize checks the policy for an operation on one lease (nothing to
// check when name is ""), for the principal authenticate recorded. It
// answers the refusal itself and returns false.
func (a *api) authorize(w http.ResponseWriter, r *http.Request, op, name string) bool {
	if name == "" || a.cfg.Policy == nil {
		return true
	}
	principal := principalOf(r)
	if verb := verbOf[op]; !a.cfg.Policy.Allowed(principal, verb, name) {
		a.deny(w, r, op, principal, name, verb)
		return false
	}
	return true
}

// deny answers 403 permission_denied and writes the audit line.
func (a *api) deny(w http.ResponseWriter, r *http.Request, op, principal, name string, verb auth.Verb) {
	detail := "the policy does not grant " + string(verb) + " on this name to this caller"
	a.cfg.Audit.Refused(r.Context(), op, codePermissionDenied, principal, name, detail)
	a.fail(w, r, problem{status: http.StatusForbidden, code: codePermissionDenied, detail: detail})
}

// principalOf is the authenticated caller of r ("" when authentication is
// off), as admit recorded it.
func principalOf(r *http.Request) string {
	if info := requestInfo(r); info != nil {
		return info.principal
	}
	return ""
}

// clientAddr is the host of the request's remote address.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
