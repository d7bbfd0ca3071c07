package fence

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

// Guard keeps the highest fencing token it has verified per lease and
// refuses a proof with a lower one: the writes of a deposed holder stop at
// the sink. Safe for concurrent use. Its memory is the process's (see the
// package doc's Limits).
type Guard struct {
	v    *Verifier
	mu   sync.Mutex
	high map[string]int64
}

// NewGuard returns a Guard that verifies with v.
func NewGuard(v *Verifier) *Guard {
	return &Guard{v: v, high: map[string]int64{}}
}

// Check verifies proof (Verifier.Verify), requires it to be for lease
// name, and admits it if its token is at least the highest this Guard has
// admitted for the lease, which it then becomes. An equal token is
// admitted: the same holder writes many times. A lower one is ErrStale; an
// empty proof is ErrMissing, as in the Python and TypeScript Guards.
func (g *Guard) Check(ctx context.Context, name, proof string) (Claims, error) {
	if proof == "" {
		return Claims{}, fmt.Errorf("%w: send the holding's proof in the %s header", ErrMissing, Header)
	}
	c, err := g.v.Verify(ctx, proof)
	if err != nil {
		return Claims{}, err
	}
	if c.Lease != name {
		return Claims{}, fmt.Errorf("%w: the proof is for %q, the write for %q", ErrOtherLease, c.Lease, name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.high[name]; c.FencingToken < h {
		return Claims{}, fmt.Errorf("%w: token %d of lease %q, but token %d has written", ErrStale, c.FencingToken, name, h)
	}
	g.high[name] = c.FencingToken
	return c, nil
}

// Highest returns the highest token admitted for lease name; 0 if none.
func (g *Guard) Highest(name string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.high[name]
}

type claimsKey struct{}

// FromContext returns the claims of the proof Guard.Middleware admitted
// for the request of ctx.
func FromContext(ctx context.Context) (Claims, bool) {
	c, ok := ctx.Value(claimsKey{}).(Claims)
	return c, ok
}

// Middleware serves next only the requests whose Leasesvc-Fence header
// holds a proof Check admits for the lease leaseOf names; the claims are
// in the request's context (FromContext). Refusals are plain-text answers
// with the reason: 401 without a proof, 403 for a malformed, forged,
// unknown-key, other-issuer or other-lease proof, 409 for a stale token,
// 503 when the keys cannot be read.
func (g *Guard) Middleware(leaseOf func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proof := r.Header.Get(Header)
		if proof == "" {
			http.Error(w, fmt.Sprintf("%v: send the holding's proof in the %s header", ErrMissing, Header), http.StatusUnauthorized)
			return
		}
		c, err := g.Check(r.Context(), leaseOf(r), proof)
		if err != nil {
			http.Error(w, err.Error(), Status(err))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, c)))
	})
}

// Status is the HTTP status a sink answers a refused proof with.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrMissing):
		return http.StatusUnauthorized
	case errors.Is(err, ErrStale):
		return http.StatusConflict
	case errors.Is(err, ErrMalformed), errors.Is(err, ErrSignature), errors.Is(err, ErrUnknownKey),
		errors.Is(err, ErrIssuer), errors.Is(err, ErrOtherLease):
		return http.StatusForbidden
	}
	return http.StatusServiceUnavailable
}
