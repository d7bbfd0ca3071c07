package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/leasesvc/leasesvc/lease"
)

// Problem codes of the checks on where a request comes from.
const (
	codeOriginNotAllowed = "origin_not_allowed"
	codeHostNotAllowed   = "host_not_allowed"
)

// apiPathPrefix starts every route of the lease API; the checks of this
// file apply to them, not to the probes, /openapi.json or the dashboard's
// static files.
const apiPathPrefix = "/v1/"

// sources decides which requests the lease API serves by where they come
// from (docs/security.md "Cross-site requests"):
//
//   - a request with an Origin header must come from the service's own
//     origin (the Origin's host is the request's Host) or from one of
//     origins; browsers send Origin on every cross-origin request and on
//     every same-origin one that is not a GET or HEAD, so a page on
//     another origin cannot have a browser act here. A request without
//     Origin (any non-browser client, a same-origin GET) passes.
//   - with authentication off (checkHost), the Host must be a loopback
//     name (localhost, *.localhost, 127.0.0.0/8, ::1) or one of hosts, so
//     that a name an attacker's DNS points at 127.0.0.1 (DNS rebinding)
//     reaches nothing. With authentication on a rebound page has no
//     credentials to send, and the Host is not checked.
type sources struct {
	origins   map[string]bool // allowed origins, "scheme://host[:port]", lower case
	hosts     map[string]bool // allowed Host names, lower case, without port
	anyHost   bool            // hosts holds "*"
	checkHost bool
}

// newSources checks the configured origins and hosts and returns the
// checks.
func newSources(origins, hosts []string, checkHost bool) (*sources, error) {
	s := &sources{origins: map[string]bool{}, hosts: map[string]bool{}, checkHost: checkHost}
	for _, o := range origins {
		if err := ValidOrigin(o); err != nil {
			return nil, fmt.Errorf("httpapi: Config.AllowedOrigins: %w", err)
		}
		norm, _ := normalOrigin(o)
		s.origins[norm] = true
	}
	for _, h := range hosts {
		if err := ValidHost(h); err != nil {
			return nil, fmt.Errorf("httpapi: Config.AllowedHosts: %w", err)
		}
		if h == "*" {
			s.anyHost = true
		}
		s.hosts[strings.TrimSuffix(strings.Trim(strings.ToLower(h), "[]"), ".")] = true
	}
	return s, nil
}

// ValidOrigin reports whether o can be an entry of Config.AllowedOrigins:
// an origin, scheme://host[:port], with scheme http or https.
func ValidOrigin(o string) error {
	if _, ok := normalOrigin(o); !ok {
		return fmt.Errorf("%q is not an origin: want scheme://host[:port], such as https://tools.example.com", o)
	}
	return nil
}

// ValidHost reports whether h can be an entry of Config.AllowedHosts: a
// host name or IP address (IPv6 in brackets) without scheme or port, or
// "*" for every host.
func ValidHost(h string) error {
	if h == "*" {
		return nil
	}
	name := h
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		if ip := net.ParseIP(h[1 : len(h)-1]); ip != nil && strings.Contains(h, ":") {
			return nil
		}
	}
	if name == "" || len(name) > 253 || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_')
	}) {
		return fmt.Errorf("%q is not a host name: want a name or address without scheme or port, such as leasesvc.internal or 10.0.0.5, or * for every host", h)
	}
	return nil
}

// normalOrigin returns o as browsers serialize an origin, in lower case and
// without a default port; ok is false for anything that is not one.
func normalOrigin(o string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", false
	}
	return strings.ToLower(u.Scheme) + "://" + withoutDefaultPort(strings.ToLower(u.Host)), true
}

// withoutDefaultPort drops :80 and :443 from host[:port]: an Origin never
// carries them, a Host header might.
func withoutDefaultPort(hostport string) string {
	if h, port, err := net.SplitHostPort(hostport); err == nil && (port == "80" || port == "443") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return hostport
}

// check returns the 403 for a request the API does not serve for where it
// comes from, or nil.
func (s *sources) check(r *http.Request) *problem {
	if s.checkHost && !s.hostAllowed(r.Host) {
		return &problem{status: http.StatusForbidden, code: codeHostNotAllowed,
			detail: "with authentication off this service answers only requests addressed to a loopback name (localhost, 127.0.0.1, [::1]) or to a name in LEASESVC_ALLOWED_HOSTS; the Host was " + clip(r.Host, 64)}
	}
	origins := r.Header.Values("Origin")
	if len(origins) == 0 {
		return nil
	}
	if len(origins) == 1 && s.originAllowed(origins[0], r.Host) {
		return nil
	}
	return &problem{status: http.StatusForbidden, code: codeOriginNotAllowed,
		detail: "requests from a web page on another origin are refused (Origin " + clip(strings.Join(origins, ", "), 64) + "); list the origin in LEASESVC_ALLOWED_ORIGINS to allow it"}
}

// originAllowed reports whether origin is the request's own (its host is
// the request's Host, whatever the scheme: TLS may end in front of the
// service) or a configured one. "null" (a sandboxed frame, a file: page)
// is never allowed.
func (s *sources) originAllowed(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return false
	}
	if withoutDefaultPort(strings.ToLower(u.Host)) == withoutDefaultPort(strings.ToLower(host)) {
		return true
	}
	norm, ok := normalOrigin(origin)
	return ok && s.origins[norm]
}

// hostAllowed reports whether the Host header names a loopback address or
// name, or a configured host.
func (s *sources) hostAllowed(hostport string) bool {
	if s.anyHost {
		return true
	}
	host := strings.ToLower(hostport)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || s.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// guardSources answers 403 to a request on the lease API that the sources
// do not allow, before anything else looks at it, and writes its audit
// line (the caller is not authenticated yet: principal "").
func (a *api) guardSources(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, apiPathPrefix) {
			if p := a.sources.check(r); p != nil {
				op, name := guardedOp(r)
				a.cfg.Audit.Refused(r.Context(), op, p.code, "", name, p.detail)
				writeProblem(w, r, *p)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// guardedOp names the operation a request refused by guardSources asked
// for, as audit lines name operations (get, list, watch, acquire, …,
// connect for the session upgrade), and its lease name or list prefix
// when valid ("" otherwise, so that nothing hostile is logged).
func guardedOp(r *http.Request) (op, name string) {
	switch p := r.URL.Path; {
	case p == SessionsPath:
		return "connect", ""
	case p == leasesPrefix:
		return "list", validOrEmpty(r.URL.Query().Get("prefix"))
	case p == watchPrefixPath:
		return "watch", validOrEmpty(r.URL.Query().Get("prefix"))
	case strings.HasPrefix(p, leasesPrefix+"/"):
		seg := strings.TrimPrefix(p, leasesPrefix+"/")
		name, verb := seg, ""
		if i := strings.LastIndexByte(seg, ':'); i >= 0 {
			name, verb = seg[:i], seg[i+1:]
		}
		switch {
		case verb != "" && len(verb) <= 16 && lease.ValidName(verb):
			op = verb
		case verb == "" && r.Method == http.MethodDelete:
			op = "delete"
		case verb == "":
			op = "get"
		default:
			op = "unknown"
		}
		return op, validOrEmpty(name)
	}
	return "unknown", ""
}

// validOrEmpty is name if it is a valid lease name (or prefix), else "".
func validOrEmpty(name string) string {
	if lease.ValidName(name) {
		return name
	}
	return ""
}
