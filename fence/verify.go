package fence

import (
	"context"
	"errors"
	"fmt"
)

// Verifier checks proofs against the service's keys.
type Verifier struct {
	keys   Keys
	issuer string
}

// NewVerifier returns a Verifier over keys; a non-empty issuer is the
// service's name (LEASESVC_PROOF_ISSUER) that every proof must carry.
func NewVerifier(keys Keys, issuer string) (*Verifier, error) {
	if keys == nil {
		return nil, errors.New("fence: NewVerifier: keys is nil")
	}
	return &Verifier{keys: keys, issuer: issuer}, nil
}

// Verify checks that proof is a proof signed by one of the service's keys
// and returns its claims. Its errors wrap ErrMalformed, ErrUnknownKey,
// ErrSignature or ErrIssuer, or are the Keys' own (keys unreadable).
func (v *Verifier) Verify(ctx context.Context, proof string) (Claims, error) {
	p, err := parse(proof)
	if err != nil {
		return Claims{}, err
	}
	key, err := v.keys.Key(ctx, p.header.Kid)
	if err != nil {
		return Claims{}, err
	}
	if !strictVerify(key, []byte(p.signed), p.sig) {
		return Claims{}, fmt.Errorf("%w: the proof of lease %q token %d does not verify with key %q", ErrSignature, p.claims.Lease, p.claims.FencingToken, p.header.Kid)
	}
	if v.issuer != "" && p.claims.Issuer != v.issuer {
		return Claims{}, fmt.Errorf("%w: issued by %q, want %q", ErrIssuer, p.claims.Issuer, v.issuer)
	}
	return p.claims, nil
}
