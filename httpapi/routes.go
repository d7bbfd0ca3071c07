package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/leasesvc/leasesvc/lease"
)

// Route is one route of the API as the OpenAPI document names it.
type Route struct {
	// Method is the HTTP method.
	Method string
	// Pattern is the path, with {name} for the lease name and an AIP-136
	// custom method after a colon.
	Pattern string
}

// leasesPrefix is the path of the lease collection.
const leasesPrefix = "/v1/leases"

// Routes lists every route the handler serves.
func Routes() []Route {
	var out []Route
	for _, rt := range fixedRoutes {
		out = append(out, Route{rt.method, rt.path})
	}
	out = append(out, Route{http.MethodGet, SessionsPath})
	for _, rt := range leaseRoutes {
		p := leasesPrefix + "/{name}"
		if rt.verb != "" {
			p += ":" + rt.verb
		}
		out = append(out, Route{rt.method, p})
	}
	return out
}

// fixedRoute is a route without a lease name in its path. HEAD is answered
// wherever GET is.
type fixedRoute struct {
	method, path string
	handler      func(*api) http.HandlerFunc
	// query lists the query parameters the route takes; any other is a
	// 400 (nil: none). Probes (/healthz, /readyz) ignore their query.
	query []string
}

// leaseRoute is a route on one lease: /v1/leases/{name} or {name}:verb.
type leaseRoute struct {
	method, verb string
	handler      func(a *api, w http.ResponseWriter, r *http.Request, name string)
	query        []string // the query parameters the route takes
}

var fixedRoutes = []fixedRoute{
	{method: http.MethodGet, path: "/healthz", handler: func(a *api) http.HandlerFunc { return a.healthz }},
	{method: http.MethodGet, path: "/readyz", handler: func(a *api) http.HandlerFunc { return a.readyz }},
	{method: http.MethodGet, path: "/openapi.json", handler: func(a *api) http.HandlerFunc { return serveOpenAPI }, query: []string{}},
	{method: http.MethodGet, path: JWKSPath, handler: func(a *api) http.HandlerFunc { return a.jwks }, query: []string{"kid"}},
	{method: http.MethodGet, path: leasesPrefix, handler: func(a *api) http.HandlerFunc { return a.list }, query: []string{"prefix", "pageSize", "pageToken"}},
	{method: http.MethodGet, path: watchPrefixPath, handler: func(a *api) http.HandlerFunc { return a.watchPrefix }}, // checks its own query
}

// JWKSPath serves the public keys of the proofs (docs/contract.md §17).
const JWKSPath = "/.well-known/jwks.json"

// watchPrefixPath is the path of the prefix stream (docs/contract.md §10).
const watchPrefixPath = leasesPrefix + ":watch"

var leaseRoutes = []leaseRoute{
	{method: http.MethodGet, verb: "", handler: (*api).get},
	{method: http.MethodDelete, verb: "", handler: (*api).deleteLease},
	{method: http.MethodPost, verb: "acquire", handler: (*api).acquire},
	{method: http.MethodPost, verb: "renew", handler: (*api).renew},
	{method: http.MethodPost, verb: "release", handler: (*api).release},
	{method: http.MethodGet, verb: "watch", handler: (*api).watch},
	{method: http.MethodPost, verb: "revoke", handler: (*api).revoke},
	{method: http.MethodPost, verb: "transfer", handler: (*api).transfer},
}

// allows reports whether a route of method answers the request's method:
// the same, or HEAD where GET is.
func allows(method, reqMethod string) bool {
	return method == reqMethod || method == http.MethodGet && reqMethod == http.MethodHead
}

// allowHeader lists the methods of routes, with HEAD wherever GET is.
func allowHeader(methods []string) []string {
	if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
		methods = append(methods, http.MethodHead)
	}
	return methods
}

// routes registers every route on r. Lease routes share one chi pattern and
// are told apart by their custom method here, so that a bad name is a 400,
// an unknown custom method a 404 and a wrong HTTP method a 405 with Allow.
func (a *api) routes(r chi.Router) {
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem{status: http.StatusNotFound, code: codeNotFound, detail: "no route for " + clip(r.URL.Path, maxLoggedPath)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, leasesPrefix+"/") { // a method chi does not know
			a.dispatchLease(w, r)
			return
		}
		var allow []string
		if r.URL.Path == SessionsPath {
			allow = append(allow, http.MethodGet)
		}
		for _, rt := range fixedRoutes {
			if rt.path == r.URL.Path {
				allow = append(allow, rt.method)
			}
		}
		methodNotAllowed(w, r, allowHeader(allow))
	})
	for _, rt := range fixedRoutes {
		h := rt.handler(a)
		op := ""
		switch rt.path {
		case leasesPrefix:
			op = "list"
		case watchPrefixPath:
			op = "watch"
		}
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			routed(r, rt.path, op, "")
			if rt.query != nil && op == "" { // list checks its query once it has authenticated the caller
				if _, p := checkQuery(r, rt.query...); p != nil {
					a.fail(w, r, *p)
					return
				}
			}
			h(w, r)
		})
		r.Method(rt.method, rt.path, handler)
		if rt.method == http.MethodGet {
			r.Method(http.MethodHead, rt.path, handler)
		}
	}
	if a.cfg.Sessions != nil { // without sessions the route is 404: clients fall back to plain renewals
		r.Method(http.MethodGet, SessionsPath, http.HandlerFunc(a.connectSession))
	}
	a.extraRoutes(r)
	r.HandleFunc(leasesPrefix+"/", a.dispatchLease)
	r.HandleFunc(leasesPrefix+"/{name}", a.dispatchLease)
}

// dispatchLease routes /v1/leases/{name}[:verb] by custom method and HTTP method.
func (a *api) dispatchLease(w http.ResponseWriter, r *http.Request) {
	seg := strings.TrimPrefix(r.URL.Path, leasesPrefix+"/")
	name, verb := seg, ""
	if i := strings.LastIndexByte(seg, ':'); i >= 0 {
		name, verb = seg[:i], seg[i+1:]
	}
	var allow []string
	for _, rt := range leaseRoutes {
		if rt.verb != verb {
			continue
		}
		if allows(rt.method, r.Method) {
			route, op := leasesPrefix+"/{name}", "get"
			if verb != "" {
				route, op = route+":"+verb, verb
			} else if rt.method == http.MethodDelete {
				op = "delete"
			}
			// The name is checked before anything logs it, so that a
			// huge or hostile path never reaches a log line; the caller
			// is authenticated before anything of the request is
			// refused as invalid (401, not 400), and authorized on the
			// name before the query is (403, not 400).
			valid := lease.ValidName(name)
			logged := ""
			if valid {
				logged = name
			}
			routed(r, route, op, logged)
			if !a.authenticate(w, r, op, logged) {
				return
			}
			if valid && op != "acquire" && lease.Reserved(name) {
				// A session's own record and a proof key's are the
				// service's: no route finds them (docs/contract.md §14,
				// §17); an acquire is refused 400 by the Manager, as the
				// name is reserved.
				writeProblem(w, r, problem{status: http.StatusNotFound, code: codeNotFound, detail: "no such lease"})
				return
			}
			if !valid {
				a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
					violations: []lease.FieldViolation{{Field: "name", Description: "must be 1–128 characters of [A-Za-z0-9._-] starting with a letter or digit"}}})
				return
			}
			if !a.authorize(w, r, op, name) {
				return
			}
			if _, p := checkQuery(r, rt.query...); p != nil {
				a.fail(w, r, *p)
				return
			}
			// Past the overload manager's soft threshold new work is
			// refused; what keeps a holding is not (docs/contract.md §16).
			if (op == "acquire" || op == "get" || op == "watch") && a.refuseNew(w, r, op) {
				return
			}
			// The body is charged to the memory budget while the
			// handler holds it (docs/contract.md §16).
			release, ok := a.chargeBody(w, r)
			if !ok {
				return
			}
			defer release()
			rt.handler(a, w, r, name)
			return
		}
		allow = append(allow, rt.method)
	}
	if len(allow) == 0 {
		writeProblem(w, r, problem{status: http.StatusNotFound, code: codeNotFound, detail: "unknown custom method :" + clip(verb, 64)})
		return
	}
	methodNotAllowed(w, r, allowHeader(allow))
}

// checkQuery parses r's query string strictly: every parameter must be one
// of allowed, appear once, and be well-formed (percent-escapes, UTF-8);
// otherwise it returns the 400 naming the parameter.
func checkQuery(r *http.Request, allowed ...string) (url.Values, *problem) {
	bad := func(field, format string, args ...any) *problem {
		return &problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid query parameters",
			violations: []lease.FieldViolation{{Field: field, Description: fmt.Sprintf(format, args...)}}}
	}
	out := url.Values{}
	raw := r.URL.RawQuery
	if raw == "" {
		return out, nil
	}
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil || !utf8.ValidString(key) || strings.Contains(key, ";") {
			return nil, bad("query", "has a malformed parameter name %q", clip(k, 64))
		}
		if !slices.Contains(allowed, key) {
			return nil, bad(clip(key, 64), "is not a query parameter of this request")
		}
		val, err := url.QueryUnescape(v)
		if err != nil || !utf8.ValidString(val) {
			return nil, bad(key, "is malformed: want percent-encoded UTF-8")
		}
		if out.Has(key) {
			return nil, bad(key, "is given more than once")
		}
		out.Set(key, val)
	}
	return out, nil
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeProblem(w, r, problem{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed,
		detail: clip(r.Method, 32) + " is not allowed here; allowed: " + strings.Join(allow, ", ")})
}
