package auth

import (
	"fmt"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Authenticator identifies the principal behind a request.
type Authenticator interface {
	// Authenticate returns the principal of the request's
	// "Authorization: Bearer <token>" credentials. Errors wrap
	// ErrUnauthenticated or ErrUnavailable; their text never contains the
	// token. It is safe for concurrent use.
	Authenticate(r *http.Request) (principal string, err error)
}

// ErrMalformedHeader is wrapped, with ErrUnauthenticated, by the error for
// an Authorization header that contains a control character: a tab, a line
// break (what obsolete line folding, RFC 7230 §3.2.4, leaves when nothing
// unfolded it), NUL or another. Such a header is refused whatever its
// token, before the token is looked at.
var ErrMalformedHeader = fmt.Errorf("%w: malformed Authorization header", ErrUnauthenticated)

// bearerToken returns the token of r's "Authorization: Bearer <token>"
// header. The scheme is case-insensitive; exactly one Authorization header
// with exactly one single-space-separated, non-empty token and no control
// characters is accepted. Errors wrap ErrUnauthenticated and never echo the
// header.
func bearerToken(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", fmt.Errorf("%w: missing Authorization header", ErrUnauthenticated)
	case len(values) > 1:
		return "", fmt.Errorf("%w: more than one Authorization header", ErrUnauthenticated)
	}
	h := values[0]
	if i := strings.IndexFunc(h, unicode.IsControl); i >= 0 {
		// net/http unfolds obs-fold into one space and refuses most
		// control characters itself, but lets a tab through, and a
		// handler may be called without it. base64 decoding skips "\r"
		// and "\n", so a token must not be read around them.
		c, _ := utf8.DecodeRuneInString(h[i:])
		return "", fmt.Errorf("%w: it contains the control character %U at byte %d; send \"Bearer <token>\" on one line, with one space and no tabs", ErrMalformedHeader, c, i+1)
	}
	scheme, token, found := strings.Cut(h, " ")
	switch {
	case strings.TrimSpace(h) == "":
		return "", fmt.Errorf("%w: empty Authorization header", ErrUnauthenticated)
	case !strings.EqualFold(scheme, "Bearer"):
		// Not echoing the scheme: a header without one may be a bare token.
		return "", fmt.Errorf("%w: Authorization scheme must be Bearer", ErrUnauthenticated)
	case !found || token == "":
		return "", fmt.Errorf("%w: empty bearer token", ErrUnauthenticated)
	case strings.ContainsAny(token, " \t"):
		return "", fmt.Errorf("%w: Authorization header must be \"Bearer <token>\" with exactly one token", ErrUnauthenticated)
	}
	return token, nil
}
