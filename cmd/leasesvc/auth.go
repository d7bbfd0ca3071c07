package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/compute/metadata"

	"github.com/leasesvc/leasesvc/auth"
	"github.com/leasesvc/leasesvc/httpapi"
)

// Default per-principal rate limit when authentication is on.
const (
	defaultRateLimit = 100 // requests per second
)

// metadataLookup reads a value of the metadata server (Cloud Run's, GCE's).
func metadataLookup(ctx context.Context, path string) (string, error) {
	return metadata.GetWithContext(ctx, path)
}

// cloudRunAudience is the accepted ID-token audience when
// LEASESVC_AUTH_AUDIENCES is unset: on Cloud Run (K_SERVICE set), the
// service's deterministic URL https://SERVICE-PROJECT_NUMBER.REGION.run.app,
// made from K_SERVICE and the metadata server, none of which a caller can
// set. Anywhere else the audiences must be configured.
func cloudRunAudience(ctx context.Context, getenv func(string) string, lookup func(context.Context, string) (string, error)) (string, error) {
	service := getenv("K_SERVICE")
	if service == "" {
		return "", errors.New("LEASESVC_AUTH=google needs LEASESVC_AUTH_AUDIENCES, the service's URLs that callers mint ID tokens for (comma-separated); only on Cloud Run is a default derived")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	number, err := lookup(ctx, "project/numeric-project-id")
	if err != nil {
		return "", fmt.Errorf("LEASESVC_AUTH_AUDIENCES is unset and the Cloud Run URL cannot be derived (metadata server: project number: %w); set LEASESVC_AUTH_AUDIENCES", err)
	}
	region, err := lookup(ctx, "instance/region") // projects/NUMBER/regions/REGION
	if err != nil {
		return "", fmt.Errorf("LEASESVC_AUTH_AUDIENCES is unset and the Cloud Run URL cannot be derived (metadata server: region: %w); set LEASESVC_AUTH_AUDIENCES", err)
	}
	region = region[strings.LastIndexByte(region, '/')+1:]
	number = strings.TrimSpace(number)
	if !cloudRunPartRE.MatchString(service) || !numberRE.MatchString(number) || !cloudRunPartRE.MatchString(region) {
		return "", fmt.Errorf("LEASESVC_AUTH_AUDIENCES is unset and the Cloud Run URL cannot be derived from service %q, project number %q, region %q; set LEASESVC_AUTH_AUDIENCES", service, number, region)
	}
	return "https://" + service + "-" + number + "." + region + ".run.app", nil
}

var (
	cloudRunPartRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	numberRE       = regexp.MustCompile(`^[0-9]{1,20}$`)
)

// access is who may call the service and how often.
type access struct {
	mode    string             // none | google | static
	authn   auth.Authenticator // nil when mode is none
	policy  *auth.Policy       // nil allows everything
	limiter *auth.Limiter      // nil-safe; no limit when rate is 0
	rate    float64
	burst   int
	origins []string // LEASESVC_ALLOWED_ORIGINS: other origins whose requests are served
	hosts   []string // LEASESVC_ALLOWED_HOSTS: Host names served besides loopback ones with none
}

// newAccess reads LEASESVC_AUTH (none | google | static), its settings,
// LEASESVC_POLICY and the rate limit. Every error names the variable.
func newAccess(ctx context.Context, getenv func(string) string, log *slog.Logger) (access, error) {
	a := access{mode: getenv("LEASESVC_AUTH")}
	if a.mode == "" {
		a.mode = "none"
	}
	var err error
	switch a.mode {
	case "none":
		if p := getenv("LEASESVC_POLICY"); p != "" {
			return a, errors.New("LEASESVC_POLICY is set but LEASESVC_AUTH=none: a policy needs authenticated principals; set LEASESVC_AUTH=google or static")
		}
		log.Warn("authentication is off (LEASESVC_AUTH=none): anyone who can reach the service can acquire, renew, release and revoke any lease")
	case "static":
		path := getenv("LEASESVC_AUTH_TOKENS")
		if path == "" {
			return a, errors.New("LEASESVC_AUTH=static needs LEASESVC_AUTH_TOKENS, the path of the tokens file")
		}
		if a.authn, err = auth.LoadStatic(path); err != nil {
			return a, fmt.Errorf("LEASESVC_AUTH_TOKENS: %w", err)
		}
	case "google":
		var auds []string
		for s := range strings.SplitSeq(getenv("LEASESVC_AUTH_AUDIENCES"), ",") {
			if s = strings.TrimSpace(s); s != "" {
				auds = append(auds, s)
			}
		}
		if len(auds) == 0 {
			aud, err := cloudRunAudience(ctx, getenv, metadataLookup)
			if err != nil {
				return a, err
			}
			log.Info("LEASESVC_AUTH_AUDIENCES unset: accepting ID tokens for this Cloud Run service's URL", "audience", aud)
			auds = []string{aud}
		}
		if a.authn, err = auth.NewGoogle(ctx, auth.GoogleConfig{Audiences: auds}); err != nil {
			return a, fmt.Errorf("LEASESVC_AUTH=google: %w", err)
		}
	default:
		return a, fmt.Errorf("LEASESVC_AUTH=%q: must be none, google or static", a.mode)
	}
	if a.mode != "none" {
		path := getenv("LEASESVC_POLICY")
		if path == "" {
			return a, fmt.Errorf("LEASESVC_AUTH=%s needs LEASESVC_POLICY, the path of the policy file that grants principals verbs on lease names", a.mode)
		}
		if a.policy, err = auth.LoadPolicy(path); err != nil {
			return a, fmt.Errorf("LEASESVC_POLICY: %w", err)
		}
		a.rate = defaultRateLimit
	}
	if v := getenv("LEASESVC_RATE_LIMIT"); v != "" {
		if a.rate, err = strconv.ParseFloat(v, 64); err != nil || a.rate < 0 || a.rate != a.rate {
			return a, fmt.Errorf("LEASESVC_RATE_LIMIT=%q: must be a number of requests per second ≥ 0 (0: no limit)", v)
		}
	}
	a.burst = max(int(2*a.rate), 1)
	if v := getenv("LEASESVC_RATE_BURST"); v != "" {
		if a.burst, err = strconv.Atoi(v); err != nil || a.burst < 1 {
			return a, fmt.Errorf("LEASESVC_RATE_BURST=%q: must be an integer ≥ 1", v)
		}
	}
	if a.rate > 0 {
		a.limiter = auth.NewLimiter(a.rate, a.burst)
	}
	for _, o := range commaList(getenv("LEASESVC_ALLOWED_ORIGINS")) {
		if err := httpapi.ValidOrigin(o); err != nil {
			return a, fmt.Errorf("LEASESVC_ALLOWED_ORIGINS: %w", err)
		}
		a.origins = append(a.origins, o)
	}
	for _, h := range commaList(getenv("LEASESVC_ALLOWED_HOSTS")) {
		if err := httpapi.ValidHost(h); err != nil {
			return a, fmt.Errorf("LEASESVC_ALLOWED_HOSTS: %w", err)
		}
		a.hosts = append(a.hosts, h)
	}
	return a, nil
}

// commaList splits a comma-separated setting, dropping spaces and empty
// items.
func commaList(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
