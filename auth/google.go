package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/api/idtoken"
)

// GoogleConfig configures NewGoogle.
type GoogleConfig struct {
	// Audiences are the accepted "aud" claims; a token is accepted if it
	// validates for any of them. Required: the accepted audience is never
	// taken from the request (its Host header, or an absolute URL in its
	// request line), which the caller chooses.
	Audiences []string
	// Validate checks a token's signature, expiry and audience and returns
	// its payload. nil means a real idtoken.Validator, created once by
	// NewGoogle with ValidatorOptions, which fetches and caches Google's
	// public certificates. Tests set a fake.
	Validate func(ctx context.Context, token, audience string) (*idtoken.Payload, error)
	// ValidatorOptions configure the idtoken.Validator created when
	// Validate is nil, for example option.WithHTTPClient. It is an error to
	// set them together with Validate.
	ValidatorOptions []idtoken.ClientOption
}

// google authenticates Google-signed OpenID Connect ID tokens.
type google struct {
	audiences []string
	validate  func(ctx context.Context, token, audience string) (*idtoken.Payload, error)
	// checkShape is set with the real idtoken validator: tokens go through
	// checkJWS first.
	checkShape bool
}

var _ Authenticator = (*google)(nil)

// NewGoogle returns an Authenticator for Google-signed ID tokens, such as
// those of Cloud Run service-to-service calls or
// `gcloud auth print-identity-token`. The principal is the token's "email"
// claim, which must be present with "email_verified" true (a JSON boolean or
// the string "true"). ctx is used only to create the validator.
func NewGoogle(ctx context.Context, cfg GoogleConfig) (Authenticator, error) {
	g := &google{audiences: make([]string, 0, len(cfg.Audiences)), validate: cfg.Validate}
	for i, a := range cfg.Audiences {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool { return r <= ' ' || r == 0x7F }) {
			return nil, fmt.Errorf("auth: GoogleConfig.Audiences[%d] %q: want a non-empty audience without whitespace", i, a)
		}
		g.audiences = append(g.audiences, a)
	}
	if len(g.audiences) == 0 {
		return nil, errors.New("auth: GoogleConfig.Audiences is empty: list the audiences to accept (the service's URLs); the request's Host is the caller's choice and never one")
	}
	if g.validate != nil {
		if len(cfg.ValidatorOptions) > 0 {
			return nil, errors.New("auth: GoogleConfig.ValidatorOptions are only used when Validate is nil")
		}
		return g, nil
	}
	v, err := idtoken.NewValidator(ctx, cfg.ValidatorOptions...)
	if err != nil {
		return nil, fmt.Errorf("auth: create Google ID token validator: %w", err)
	}
	g.validate, g.checkShape = v.Validate, true
	return g, nil
}

// Authenticate validates r's bearer token as a Google ID token for each
// audience in turn and returns its verified email. With the real validator
// the token's form is checked first (checkJWS); a panic of the validator is
// recovered and refuses the token (ErrUnauthenticated).
func (g *google) Authenticate(r *http.Request) (string, error) {
	token, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	if g.checkShape {
		if err := checkJWS(token); err != nil {
			return "", err
		}
	}
	var invalid, unavailable error
	for _, aud := range g.audiences {
		p, err := g.safeValidate(r.Context(), token, aud)
		if errors.Is(err, errValidatorPanic) {
			return "", err
		}
		switch {
		case err == nil:
			return verifiedEmail(p)
		case transient(err):
			unavailable = err
		case invalid == nil:
			invalid = err
		}
	}
	if unavailable != nil {
		// Another audience might have validated had the certificates
		// been reachable.
		return "", fmt.Errorf("%w: verify Google ID token: %w", ErrUnavailable, redact(unavailable, token))
	}
	return "", fmt.Errorf("%w: invalid Google ID token: %w", ErrUnauthenticated, redact(invalid, token))
}

// safeValidate is g.validate, with a panic turned into an error that wraps
// ErrUnauthenticated and errValidatorPanic: a token that crashes the
// validator is refused like any other bad token, with a 401 and an audit
// line, instead of a dropped connection.
func (g *google) safeValidate(ctx context.Context, token, aud string) (p *idtoken.Payload, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = nil, redact(fmt.Errorf("%w: invalid Google ID token: %w (recovered panic: %v)", ErrUnauthenticated, errValidatorPanic, v), token)
		}
	}()
	return g.validate(ctx, token, aud)
}

// verifiedEmail returns the principal of a validated token: its "email"
// claim, provided "email_verified" is true.
func verifiedEmail(p *idtoken.Payload) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%w: Google ID token validator returned no payload", ErrUnauthenticated)
	}
	email, ok := p.Claims["email"].(string)
	if !ok || email == "" {
		return "", fmt.Errorf("%w: Google ID token has no email claim", ErrUnauthenticated)
	}
	if bad := badText(email); bad != "" {
		return "", fmt.Errorf("%w: Google ID token email claim %s", ErrUnauthenticated, bad)
	}
	switch v := p.Claims["email_verified"].(type) {
	case bool:
		if v {
			return email, nil
		}
	case string:
		if v == "true" {
			return email, nil
		}
	}
	return "", fmt.Errorf("%w: Google ID token email %q is not verified", ErrUnauthenticated, email)
}

// transient reports whether err means the token could not be checked, rather
// than that it is invalid: a network or transport error while fetching
// Google's certificates, a context that ended, or a non-200 answer from the
// certificate endpoint (idtoken reports that only as text).
func transient(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		strings.Contains(err.Error(), "idtoken: unable to retrieve cert")
}
