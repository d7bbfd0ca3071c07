package auth

import (
	"fmt"
	"net/http"
	"strings"
)

// Authenticator identifies the principal behind a request.
type Authenticator interface {
	// Authenticate returns the principal of the request's
	// "Authorization: Bearer <token>" credentials. Errors wrap
	// ErrUnauthenticated or ErrUnavailable; their text never contains the
	// token. It is safe for concurrent use.
	Authenticate(r *http.Request) (principal string, err error)
}

// bearerToken returns the token of r's "Authorization: Bearer <token>"
// header. The scheme is case-insensitive; exactly one Authorization header
// with exactly one single-space-separated, non-empty token is accepted.
// Errors wrap ErrUnauthenticated and never echo the header.
func bearerToken(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", fmt.Errorf("%w: missing Authorization header", ErrUnauthenticated)
	case len(values) > 1:
		return "", fmt.Errorf("%w: more than one Authorization header", ErrUnauthenticated)
	}
	h := values[0]
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
