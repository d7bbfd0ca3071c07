package fence

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Header is the name of the HTTP request header that carries a proof to a
// sink (Guard.Middleware).
const Header = "Leasesvc-Fence"

// Type is the JWS "typ" of a proof: it keeps a proof from being taken for
// another kind of token signed by the same key, and the reverse.
const Type = "leasesvc-fence+jwt"

// Claims are what a proof states: leasesvc issued fencing token Token of
// lease Lease to Holder.
type Claims struct {
	// Lease is the lease name.
	Lease string `json:"lease"`
	// FencingToken is the holding's fencing token, ≥ 1.
	FencingToken int64 `json:"fencingToken"`
	// Holder is the holder that acquired.
	Holder string `json:"holder"`
	// Principal is the authenticated caller that acquired; empty with
	// authentication off.
	Principal string `json:"principal,omitempty"`
	// IssuedAt is the holding's acquire time, Unix seconds (the JWT "iat").
	IssuedAt int64 `json:"iat"`
	// Issuer names the service (the JWT "iss", LEASESVC_PROOF_ISSUER).
	Issuer string `json:"iss"`
}

// header is the protected JOSE header of a proof.
type header struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// Errors a Verifier and a Guard return, each wrapped with the details: a
// sink may show the message to the caller.
var (
	// ErrMalformed: the proof is not a compact JWS of this package's
	// form (a bare number, a truncated or re-encoded token, another alg).
	ErrMalformed = errors.New("fence: malformed proof")
	// ErrSignature: the signature does not verify with the key named by
	// kid: the proof was forged or altered.
	ErrSignature = errors.New("fence: bad signature")
	// ErrUnknownKey: no key of the service has the proof's kid (after a
	// refetch, if the keys can be refetched).
	ErrUnknownKey = errors.New("fence: unknown key")
	// ErrIssuer: the proof was issued by another service than the one the
	// Verifier expects.
	ErrIssuer = errors.New("fence: wrong issuer")
	// ErrOtherLease: the proof is for another lease than the one written.
	ErrOtherLease = errors.New("fence: proof for another lease")
	// ErrStale: a higher fencing token of the lease was seen: the proof's
	// holder was deposed.
	ErrStale = errors.New("fence: stale fencing token")
	// ErrMissing: the request carries no proof.
	ErrMissing = errors.New("fence: no proof")
)

var b64 = base64.RawURLEncoding

// Sign returns the proof of c signed with key under key id kid. The
// service signs with it; tests and tools may too, with keys of their own.
func Sign(key ed25519.PrivateKey, kid string, c Claims) (string, error) {
	h, err := json.Marshal(header{Alg: "EdDSA", Kid: kid, Typ: Type})
	if err != nil {
		return "", fmt.Errorf("fence: encode header: %w", err)
	}
	return SignWithHeader(key, b64.EncodeToString(h), c)
}

// SignWithHeader is Sign with the header already encoded (EncodedHeader),
// for an issuer that signs many proofs with one key.
func SignWithHeader(key ed25519.PrivateKey, encodedHeader string, c Claims) (string, error) {
	p, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("fence: encode claims: %w", err)
	}
	n := len(encodedHeader) + 1 + b64.EncodedLen(len(p))
	buf := make([]byte, n, n+1+b64.EncodedLen(ed25519.SignatureSize))
	copy(buf, encodedHeader)
	buf[len(encodedHeader)] = '.'
	b64.Encode(buf[len(encodedHeader)+1:], p)
	sig := ed25519.Sign(key, buf)
	buf = append(buf, '.')
	buf = b64.AppendEncode(buf, sig)
	return string(buf), nil
}

// EncodedHeader returns the encoded protected header of the proofs signed
// under kid, for SignWithHeader.
func EncodedHeader(kid string) string {
	h, _ := json.Marshal(header{Alg: "EdDSA", Kid: kid, Typ: Type}) // cannot fail: three strings
	return b64.EncodeToString(h)
}

// parsed is a proof split and decoded, its signature not yet checked.
type parsed struct {
	header header
	claims Claims
	signed string // header.payload, what the signature covers
	sig    []byte
}

// parse splits and decodes a compact JWS, checking its form only.
func parse(proof string) (parsed, error) {
	var p parsed
	if len(proof) > maxProof {
		return p, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, maxProof)
	}
	h, rest, ok1 := strings.Cut(proof, ".")
	body, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sig, ".") {
		return p, fmt.Errorf("%w: not a compact JWS (three base64url parts joined by dots)", ErrMalformed)
	}
	hj, err := decodeSegment(h)
	if err != nil {
		return p, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	if err := strictJSON(hj, &p.header); err != nil {
		return p, fmt.Errorf("%w: header: %w", ErrMalformed, err)
	}
	if p.header.Alg != "EdDSA" || p.header.Typ != Type || p.header.Kid == "" {
		return p, fmt.Errorf("%w: header must have alg EdDSA, typ %s and a kid (got alg %q, typ %q)", ErrMalformed, Type, p.header.Alg, p.header.Typ)
	}
	pj, err := decodeSegment(body)
	if err != nil {
		return p, fmt.Errorf("%w: payload: %w", ErrMalformed, err)
	}
	if err := json.Unmarshal(pj, &p.claims); err != nil { // members added later are let through
		return p, fmt.Errorf("%w: payload: %w", ErrMalformed, err)
	}
	if p.claims.Lease == "" || p.claims.FencingToken < 1 || p.claims.Holder == "" {
		return p, fmt.Errorf("%w: payload must name a lease, a holder and a fencing token ≥ 1", ErrMalformed)
	}
	if p.sig, err = decodeSegment(sig); err != nil || len(p.sig) != ed25519.SignatureSize {
		return p, fmt.Errorf("%w: signature is not %d bytes in canonical base64url", ErrMalformed, ed25519.SignatureSize)
	}
	p.signed = proof[:len(h)+1+len(body)]
	return p, nil
}

// maxProof bounds the length of a proof a Verifier reads.
const maxProof = 4096

// strictJSON decodes one JSON object, refusing unknown members and
// anything after it.
func strictJSON(data []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(data)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("data after the object")
	}
	return nil
}
