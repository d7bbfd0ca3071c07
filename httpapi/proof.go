package httpapi

import (
	"context"
	"net/http"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// Proofs signs the proofs of holdings and lists the service's public keys
// (docs/contract.md §17; internal/proofkey.Issuer).
type Proofs interface {
	// Sign returns the proof of l's holding.
	Sign(l lease.Lease) (string, error)
	// JWKS returns the JWKS document of every listed key; a kid it does
	// not hold makes it read the backend (rate-limited).
	JWKS(ctx context.Context, kid string) ([]byte, error)
}

// withProof is the wire form of l with the proof of its holding: only
// answers that start or restart a holding for the caller carry one.
func (a *api) withProof(ctx context.Context, l lease.Lease) wire.Lease {
	out := wire.FromLease(l)
	if a.cfg.Proofs == nil || !l.Held() {
		return out
	}
	p, err := a.cfg.Proofs.Sign(l)
	if err != nil { // cannot happen short of a broken key: the holding stands
		a.log.ErrorContext(ctx, "proof: signing failed; answering without a proof", "lease", l.Name, "err", err)
		return out
	}
	out.Proof = p
	return out
}

// jwks serves GET /.well-known/jwks.json: public, like OIDC discovery.
func (a *api) jwks(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Proofs == nil { // proofs off: no keys
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write([]byte(`{"keys":[]}`))
		return
	}
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	kid := r.URL.Query().Get("kid")
	doc, err := a.cfg.Proofs.JWKS(ctx, clip(kid, 64))
	if err != nil {
		a.log.WarnContext(ctx, "jwks: reading the key records failed", "err", err)
		writeProblem(w, r, problem{status: http.StatusServiceUnavailable, code: codeUnavailable, detail: "the backend does not answer", retryAfter: 1})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/jwk-set+json")
	h.Set("Cache-Control", "public, max-age=60")
	_, _ = w.Write(doc) // a client gone away: nothing to do
}
