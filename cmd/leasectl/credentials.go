package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/oauth2"

	"github.com/leasesvc/leasesvc/client"
)

// credentials records where the token of an invocation came from, for the
// hint after a refusal. It never holds the token.
type credentials struct {
	from      string // "--token", "LEASESVC_TOKEN_FILE", …; "" for none
	google    bool   // Google ID tokens were sent
	noIDToken error  // why no Google ID token was made, when one was tried
}

// credentials returns the invocation's token source: the static token of
// --token, --token-file, LEASESVC_TOKEN or LEASESVC_TOKEN_FILE (a flag
// beats the environment; two of one kind are a usage error), else, for an
// https URL, Google ID tokens for the URL (Application Default
// Credentials), else none. When no Google credentials can be found it goes
// on without a token; the hint after a 401 or 403 says why.
func (e *env) credentials(ctx context.Context) (oauth2.TokenSource, error) {
	tok, from, err := e.staticToken()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		e.creds = credentials{from: from}
		return client.StaticToken(tok), nil
	}
	if !strings.HasPrefix(strings.ToLower(e.url), "https://") {
		return nil, nil
	}
	ts, err := e.idTokens(ctx, strings.TrimRight(e.url, "/"))
	if err != nil {
		e.creds = credentials{noIDToken: err}
		return nil, nil
	}
	e.creds = credentials{from: "Application Default Credentials", google: true}
	return ts, nil
}

// staticToken returns the token given by a flag or the environment, and
// which one gave it; "" when none did.
func (e *env) staticToken() (tok, from string, err error) {
	switch {
	case e.token != "" && e.tokenFile != "":
		return "", "", usageError("--token and --token-file: give one of them")
	case e.token != "":
		return checkToken(e.token, "--token")
	case e.tokenFile != "":
		return readToken(e.tokenFile, "--token-file")
	}
	env, file := e.getenv("LEASESVC_TOKEN"), e.getenv("LEASESVC_TOKEN_FILE")
	switch {
	case env != "" && file != "":
		return "", "", usageError("LEASESVC_TOKEN and LEASESVC_TOKEN_FILE are both set: unset one, or pass --token or --token-file")
	case env != "":
		return checkToken(env, "LEASESVC_TOKEN")
	case file != "":
		return readToken(file, "LEASESVC_TOKEN_FILE")
	}
	return "", "", nil
}

// readToken reads a token file; from names the flag or variable.
func readToken(path, from string) (string, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", usageError("%s: %v", from, err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", "", usageError("%s: the token file %s is empty", from, path)
	}
	return checkToken(string(b), from)
}

// checkToken trims tok and checks that it can be a bearer token. Its
// errors never show the token.
func checkToken(tok, from string) (string, string, error) {
	tok = strings.TrimSpace(tok)
	for _, r := range tok {
		if r <= ' ' || r > '~' {
			return "", "", usageError("%s: the token has a space, a control or a non-ASCII character inside (not shown)", from)
		}
	}
	return tok, from, nil
}

// explain adds a hint to a refusal for want of credentials: how to give
// them when none were sent, where they came from when they were refused.
func (c credentials) explain(err error) error {
	if !errors.Is(err, client.ErrDenied) && !errors.Is(err, client.ErrCredentials) {
		return err
	}
	var hint string
	switch {
	case c.from == "":
		hint = "no credentials were sent. Pass --token TOKEN or --token-file FILE, or set LEASESVC_TOKEN or LEASESVC_TOKEN_FILE; " +
			`for a service on Cloud Run: --token "$(gcloud auth print-identity-token --impersonate-service-account=SA --audiences=URL --include-email)"` +
			" (a user's own gcloud token has gcloud's audience, not the service's)"
		if c.noIDToken != nil {
			hint += fmt.Sprintf(".\nhint: no Google ID token either: %v", c.noIDToken)
		}
	case c.google && errors.Is(err, client.ErrCredentials):
		hint = `no Google ID token could be made from Application Default Credentials; pass --token "$(gcloud auth print-identity-token --impersonate-service-account=SA --audiences=URL --include-email)" instead`
	case c.google && errors.Is(err, client.ErrUnauthenticated):
		hint = "the service refused the Google ID token from Application Default Credentials; pass --token to send another"
	case errors.Is(err, client.ErrUnauthenticated):
		hint = fmt.Sprintf("the service refused the token of %s (expired? an identity token from gcloud lasts an hour)", c.from)
	default:
		return err
	}
	return fmt.Errorf("%w\nhint: %s", err, hint)
}
