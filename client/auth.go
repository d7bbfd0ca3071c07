package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/oauth2"
)

// StaticToken returns a TokenSource (for Config.TokenSource) that gives tok
// every time, such as a token from a secret store or the output of
// `gcloud auth print-identity-token`. It never refreshes tok: once the
// service refuses it, calls fail with ErrUnauthenticated. An empty tok
// makes every call fail with ErrCredentials.
func StaticToken(tok string) oauth2.TokenSource {
	return staticToken(tok)
}

// staticToken is the TokenSource of StaticToken; its String does not show
// the token.
type staticToken string

// Token returns the token.
func (s staticToken) Token() (*oauth2.Token, error) {
	return &oauth2.Token{AccessToken: string(s), TokenType: "Bearer"}, nil
}

// String hides the token from %v of a Config.
func (s staticToken) String() string { return "client.StaticToken(…)" }

// nonNilToken turns a nil token without an error, on which
// oauth2.ReuseTokenSource would panic, into an error.
type nonNilToken struct{ ts oauth2.TokenSource }

func (n nonNilToken) Token() (*oauth2.Token, error) {
	tok, err := n.ts.Token()
	if err == nil && tok == nil {
		return nil, errors.New("the token source gave no token")
	}
	return tok, err
}

// authorize sets the Authorization header of req from the TokenSource, if
// any, and the same token in X-Serverless-Authorization: a Cloud Run
// service that requires authentication checks that header instead of
// Authorization and passes Authorization on to leasesvc untouched (the
// header it checks reaches the service with the token's signature
// removed, which leasesvc could not verify). oauth2.TokenSource takes no context, so the token is awaited until
// ctx (the attempt's) is done, which timeout made it; a fetch still going
// then is left to finish in the background.
func (c *Client) authorize(ctx context.Context, req *http.Request, timeout time.Duration) error {
	if c.ts == nil {
		return nil
	}
	type result struct {
		tok *oauth2.Token
		err error
	}
	ch := make(chan result, 1)
	go func() {
		tok, err := c.ts.Token()
		ch <- result{tok, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		// When the caller's ctx is done, call says so; this is the attempt's
		// timeout.
		return fmt.Errorf("%w: the token source did not answer within %v", ErrCredentials, timeout)
	}
	switch {
	case r.err != nil:
		return fmt.Errorf("%w: %w", ErrCredentials, r.err)
	case r.tok == nil || r.tok.AccessToken == "":
		return fmt.Errorf("%w: the token source gave an empty token", ErrCredentials)
	}
	req.Header.Set("Authorization", "Bearer "+r.tok.AccessToken)
	req.Header.Set("X-Serverless-Authorization", "Bearer "+r.tok.AccessToken)
	return nil
}
