package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// es256SignatureBytes is the length of an ES256 signature: r and s, 32
// bytes each (RFC 7518 §3.4).
const es256SignatureBytes = 64

// errValidatorPanic is wrapped (with ErrUnauthenticated) by the error of a
// token on which the validator panicked, which the authenticator recovers.
var errValidatorPanic = errors.New("the ID token validator failed on this token")

// jwsHeader is the part of a JWS header that idtoken reads, decoded as it
// decodes it (encoding/json into a struct: keys match case-insensitively and
// the last of duplicate keys wins), so that both see the same algorithm.
type jwsHeader struct {
	Algorithm string `json:"alg"`
	KeyID     string `json:"kid"`
}

// base64url is the unpadded URL-safe alphabet (RFC 7515 §2) in strict
// mode, which also refuses non-zero trailing bits.
var base64url = base64.RawURLEncoding.Strict()

// checkJWS checks, before idtoken sees the token, what idtoken's Validator
// relies on without checking (google.golang.org/api v0.309.0 indexes an
// ES256 signature as 64 bytes, and panics on a shorter one): a compact JWS of
// three base64url parts; a header that is a JSON object with alg RS256 or
// ES256 and a kid; a payload that decodes; a non-empty RS256 signature or an
// ES256 one of exactly 64 bytes. It refuses what idtoken would refuse or
// crash on, and nothing it would accept. Errors wrap ErrUnauthenticated and
// never contain the token.
func checkJWS(token string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: malformed Google ID token: %s", ErrUnauthenticated, fmt.Sprintf(format, args...))
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return bad("want three base64url parts separated by \".\" (header.payload.signature), got %d", len(parts))
	}
	var raw [3][]byte
	for i, name := range [...]string{"header", "payload", "signature"} {
		if j := strings.IndexFunc(parts[i], func(r rune) bool {
			return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_')
		}); j >= 0 {
			// base64.DecodeString would skip "\r" and "\n"; the
			// alphabet check refuses them and "=" padding.
			return bad("the %s is not unpadded base64url: character %d of the part is not in [A-Za-z0-9_-]", name, j+1)
		}
		var err error
		if raw[i], err = base64url.DecodeString(parts[i]); err != nil {
			return bad("the %s is not unpadded base64url: %v", name, err)
		}
	}
	var h jwsHeader
	if err := json.Unmarshal(raw[0], &h); err != nil {
		return bad("the header is not a JSON object with string fields alg and kid: %v", err)
	}
	if h.KeyID == "" {
		return bad("the header has no kid (key id)")
	}
	switch sig := raw[2]; h.Algorithm {
	case "RS256":
		if len(sig) == 0 {
			return bad("the RS256 signature is empty")
		}
	case "ES256":
		if len(sig) != es256SignatureBytes {
			return bad("the ES256 signature must be %d bytes, got %d", es256SignatureBytes, len(sig))
		}
	default:
		return bad("the header's alg must be RS256 or ES256")
	}
	return nil
}
