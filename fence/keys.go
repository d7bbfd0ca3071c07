package fence

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// JWK is an Ed25519 public key as a JSON Web Key (RFC 7517, RFC 8037).
type JWK struct {
	Kty string `json:"kty"` // "OKP"
	Crv string `json:"crv"` // "Ed25519"
	X   string `json:"x"`   // the public key, base64url
	Kid string `json:"kid"`
	Alg string `json:"alg,omitempty"` // "EdDSA"
	Use string `json:"use,omitempty"` // "sig"
}

// JWKS is a JSON Web Key Set, as /.well-known/jwks.json serves it.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// NewJWK returns pub as a JWK whose kid is KeyID(pub).
func NewJWK(pub ed25519.PublicKey) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(pub), Kid: KeyID(pub), Alg: "EdDSA", Use: "sig"}
}

// KeyID returns the key id of pub: its RFC 7638 JWK thumbprint (SHA-256,
// base64url), so a kid names one key and cannot be reused for another.
func KeyID(pub ed25519.PublicKey) string {
	// RFC 7638 §3.2: the required members in lexical order, no spaces.
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + b64.EncodeToString(pub) + `"}`))
	return b64.EncodeToString(sum[:])
}

// PublicKey decodes the key of k, checking its type, its length and that
// its kid is its thumbprint.
func (k JWK) PublicKey() (ed25519.PublicKey, error) {
	if k.Kty != "OKP" || k.Crv != "Ed25519" || k.Alg != "" && k.Alg != "EdDSA" {
		return nil, fmt.Errorf("fence: key %q: want kty OKP, crv Ed25519 (got %q, %q)", k.Kid, k.Kty, k.Crv)
	}
	x, err := b64.DecodeString(k.X)
	if err != nil || len(x) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("fence: key %q: x is not %d base64url bytes", k.Kid, ed25519.PublicKeySize)
	}
	pub := ed25519.PublicKey(x)
	if KeyID(pub) != k.Kid {
		return nil, fmt.Errorf("fence: key %q: kid is not the key's RFC 7638 thumbprint", k.Kid)
	}
	return pub, nil
}

// Keys finds the public key a proof names.
type Keys interface {
	// Key returns the key under kid, or an error wrapping ErrUnknownKey
	// when there is none; any other error means the keys could not be
	// read (a sink answers it as unavailable, not as forged). Safe for
	// concurrent use.
	Key(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// StaticKeys is a fixed key set, for sinks without network: give them the
// service's JWKS (`curl $LEASESVC/.well-known/jwks.json`) as a file.
type StaticKeys map[string]ed25519.PublicKey

// ParseJWKS reads a JWKS document (RFC 7517 §5) into a StaticKeys. Keys
// of other types are left out (RFC 7517 §5: ignored); an Ed25519 key that
// is malformed, or whose kid is not its thumbprint, is an error.
func ParseJWKS(data []byte) (StaticKeys, error) {
	var set JWKS
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("fence: read JWKS: %w", err)
	}
	keys := StaticKeys{}
	for _, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" {
			continue
		}
		pub, err := k.PublicKey()
		if err != nil {
			return nil, err
		}
		keys[k.Kid] = pub
	}
	return keys, nil
}

// Key implements Keys.
func (s StaticKeys) Key(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok := s[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("%w: %q is not in the static key set", ErrUnknownKey, kid)
}

// DefaultRefetch is RemoteKeys' default least time between two fetches.
const DefaultRefetch = 10 * time.Second

// DefaultMaxAge is RemoteKeys' default MaxAge.
const DefaultMaxAge = 10 * time.Minute

// RemoteKeys fetches a JWKS from a URL (the service's
// /.well-known/jwks.json) when a kid it does not know comes, at most once
// per Refetch: a flood of proofs under invented kids costs the service one
// fetch per Refetch.
//
// A key is answered from memory for MaxAge after the last fetch that
// listed it; a proof under a key older than that fetches the JWKS again
// (rate-limited alike), and a key the JWKS has not listed for MaxAge is
// forgotten: the service stops listing a key when its retention ends
// (LEASESVC_PROOF_KEY_RETENTION, docs/fencing.md), so a long-running sink
// answers ErrUnknownKey for it at most MaxAge (and one Refetch) later, as
// a sink that never fetched it does. While the JWKS cannot be fetched, the
// keys already known are still answered (as the service serves its cached
// list when the backend cannot be read): only a fetch that answers forgets.
//
// Set the fields before the first Key; the zero Client, Refetch, MaxAge
// and Now mean http.DefaultClient, DefaultRefetch, DefaultMaxAge and
// time.Now.
type RemoteKeys struct {
	// URL is the JWKS URL, such as https://leasesvc.example/.well-known/jwks.json.
	URL string
	// Client fetches it.
	Client *http.Client
	// Refetch is the least time between two fetches.
	Refetch time.Duration
	// MaxAge is how long a key is answered after the last fetch that
	// listed it without fetching again.
	MaxAge time.Duration
	// Now is the clock of the rate limit and of MaxAge.
	Now func() time.Time

	mu      sync.Mutex
	keys    map[string]knownKey
	fetched time.Time // last fetch attempt; zero: never
	failed  bool      // the last fetch attempt failed
}

// knownKey is a key RemoteKeys fetched and when a fetch last listed it.
type knownKey struct {
	pub    ed25519.PublicKey
	listed time.Time
}

// Key implements Keys: a kid listed less than MaxAge ago is answered from
// memory; any other fetches the JWKS again unless the last fetch was less
// than Refetch ago.
func (r *RemoteKeys) Key(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now, every, maxAge := time.Now, r.Refetch, r.MaxAge
	if r.Now != nil {
		now = r.Now
	}
	if every <= 0 {
		every = DefaultRefetch
	}
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	t := now()
	k, known := r.keys[kid]
	if known && t.Sub(k.listed) < maxAge {
		return k.pub, nil
	}
	if !r.fetched.IsZero() && t.Sub(r.fetched) < every {
		switch {
		case known && (r.failed || k.listed.Equal(r.fetched)):
			// The JWKS is unreadable (serve what is known), or the last
			// fetch listed the key (MaxAge < Refetch).
			return k.pub, nil
		case known:
			delete(r.keys, kid)
			return nil, fmt.Errorf("%w: %q was last listed in the service's JWKS %v ago (%s)", ErrUnknownKey, kid, t.Sub(k.listed).Round(time.Millisecond), r.URL)
		}
		return nil, fmt.Errorf("%w: %q is not in the JWKS fetched %v ago (refetched at most every %v)", ErrUnknownKey, kid, t.Sub(r.fetched).Round(time.Millisecond), every)
	}
	r.fetched = t
	got, err := r.fetch(ctx, kid)
	if r.failed = err != nil; r.failed {
		if known {
			return k.pub, nil
		}
		return nil, err
	}
	if r.keys == nil {
		r.keys = map[string]knownKey{}
	}
	for id, pub := range got {
		r.keys[id] = knownKey{pub: pub, listed: t}
	}
	for id, c := range r.keys {
		if t.Sub(c.listed) >= maxAge {
			delete(r.keys, id) // not listed now, nor for MaxAge: its retention ended
		}
	}
	if k, ok := r.keys[kid]; ok {
		return k.pub, nil
	}
	if known {
		return nil, fmt.Errorf("%w: %q is no longer in the service's JWKS (%s)", ErrUnknownKey, kid, r.URL)
	}
	return nil, fmt.Errorf("%w: %q is not in the service's JWKS (%s)", ErrUnknownKey, kid, r.URL)
}

// maxJWKS bounds the JWKS document RemoteKeys reads.
const maxJWKS = 1 << 20

// fetch reads the JWKS, naming kid in the query (?kid=): an instance that
// does not list that key reads the backend before it answers, so a key
// published a moment ago by another instance is found.
func (r *RemoteKeys) fetch(ctx context.Context, kid string) (StaticKeys, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("fence: JWKS URL: %w", err)
	}
	q := u.Query()
	q.Set("kid", kid)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fence: JWKS request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	c := r.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fence: fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, fmt.Errorf("fence: fetch JWKS: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fence: fetch JWKS %s: status %s", r.URL, resp.Status)
	}
	if len(body) > maxJWKS {
		return nil, fmt.Errorf("fence: JWKS %s is larger than %d bytes", r.URL, maxJWKS)
	}
	return ParseJWKS(body)
}
