// Package googleauth gives a leasesvc client Google-signed ID tokens
// (NewClient, or IDTokenSource for client.Config.TokenSource), the
// credentials that Cloud Run (and a leasesvc that verifies Google ID
// tokens) accepts. It is a package of its own because the Google auth
// libraries it needs are large; package client itself needs only the
// standard library and golang.org/x/oauth2.
//
// Where the tokens come from (Application Default Credentials):
//
//   - on Cloud Run, GCE, GKE with Workload Identity, Cloud Functions: the
//     metadata server, as the workload's service account;
//   - with GOOGLE_APPLICATION_CREDENTIALS naming a service-account key
//     file, or an impersonated-service-account or external-account
//     (workload identity federation) file: tokens signed for that account.
//
// User credentials (`gcloud auth application-default login`) cannot mint
// ID tokens for an arbitrary audience: IDTokenSource fails with them. A
// person at a shell uses `gcloud auth print-identity-token` and
// client.StaticToken (or leasectl --token) instead.
package googleauth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/oauth2"
	"google.golang.org/api/idtoken"

	"github.com/leasesvc/leasesvc/client"
)

// IDTokenSource returns a TokenSource (for client.Config.TokenSource) of
// Google-signed ID tokens whose audience is audience: the service's base
// URL, such as "https://leasesvc-123456789012.europe-west1.run.app" (Cloud
// Run's deterministic URL, which leasesvc accepts by default; the
// Terraform module's service_url output), which is what Cloud Run checks
// (a trailing "/" is dropped, as client.New drops it). The
// tokens are cached and refreshed before they expire (they last an hour).
// ctx bounds the source's own fetches for as long as it is used: pass a
// context that lives as long as the Client, not a request's.
//
// It fails when Application Default Credentials cannot be found or cannot
// mint ID tokens (user credentials); see the package doc.
func IDTokenSource(ctx context.Context, audience string) (oauth2.TokenSource, error) {
	audience = strings.TrimRight(audience, "/")
	if audience == "" {
		return nil, errors.New("googleauth.IDTokenSource: audience is empty; use the service's base URL")
	}
	ts, err := idtoken.NewTokenSource(ctx, audience)
	if err != nil {
		return nil, fmt.Errorf("googleauth.IDTokenSource: %w", err)
	}
	return ts, nil
}

// NewClient returns a client.Client of the service at baseURL that sends
// Google-signed ID tokens for baseURL from Application Default Credentials,
// the way an agent on Cloud Run, GCE or GKE calls a leasesvc deployed with
// LEASESVC_AUTH=google. A TokenSource already in cfg is kept (for example a
// client.StaticToken for local runs), so one call serves both settings. It
// fails, saying why, when no TokenSource is given and Application Default
// Credentials cannot mint ID tokens.
func NewClient(ctx context.Context, baseURL string, cfg client.Config) (*client.Client, error) {
	if cfg.TokenSource == nil {
		ts, err := IDTokenSource(ctx, baseURL)
		if err != nil {
			return nil, fmt.Errorf("googleauth.NewClient: %w", err)
		}
		cfg.TokenSource = ts
	}
	c, err := client.New(baseURL, cfg)
	if err != nil {
		return nil, fmt.Errorf("googleauth.NewClient: %w", err)
	}
	return c, nil
}
