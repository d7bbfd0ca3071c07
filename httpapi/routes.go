package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
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
	for _, rt := range leaseRoutes {
		p := leasesPrefix + "/{name}"
		if rt.verb != "" {
			p += ":" + rt.verb
		}
		out = append(out, Route{rt.method, p})
	}
	return out
}

// fixedRoute is a route without a lease name in its path.
type fixedRoute struct {
	method, path string
	handler      func(*api) http.HandlerFunc
}

// leaseRoute is a route on one lease: /v1/leases/{name} or {name}:verb.
type leaseRoute struct {
	method, verb string
	handler      func(a *api, w http.ResponseWriter, r *http.Request, name string)
}

var fixedRoutes = []fixedRoute{
	{http.MethodGet, "/healthz", func(a *api) http.HandlerFunc { return a.healthz }},
	{http.MethodGet, "/readyz", func(a *api) http.HandlerFunc { return a.readyz }},
	{http.MethodGet, "/openapi.json", func(a *api) http.HandlerFunc { return serveOpenAPI }},
	{http.MethodGet, leasesPrefix, func(a *api) http.HandlerFunc { return a.list }},
	{http.MethodGet, watchPrefixPath, func(a *api) http.HandlerFunc { return a.watchPrefix }},
}

// watchPrefixPath is the path of the prefix stream (docs/contract.md §10).
const watchPrefixPath = leasesPrefix + ":watch"

var leaseRoutes = []leaseRoute{
	{http.MethodGet, "", (*api).get},
	{http.MethodPost, "acquire", (*api).acquire},
	{http.MethodPost, "renew", (*api).renew},
	{http.MethodPost, "release", (*api).release},
	{http.MethodGet, "watch", (*api).watch},
	{http.MethodPost, "revoke", (*api).revoke},
}

// routes registers every route on r. Lease routes share one chi pattern and
// are told apart by their custom method here, so that a bad name is a 400,
// an unknown custom method a 404 and a wrong HTTP method a 405 with Allow.
func (a *api) routes(r chi.Router) {
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem{status: http.StatusNotFound, code: codeNotFound, detail: "no route for " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, rt := range fixedRoutes {
			if rt.path == r.URL.Path {
				allow = append(allow, rt.method)
			}
		}
		methodNotAllowed(w, r, allow)
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
		r.Method(rt.method, rt.path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			routed(r, rt.path, op, "")
			h(w, r)
		}))
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
		if rt.method == r.Method {
			route, op := leasesPrefix+"/{name}", "get"
			if verb != "" {
				route, op = route+":"+verb, verb
			}
			routed(r, route, op, name)
			if !a.admit(w, r, op, name) {
				return
			}
			rt.handler(a, w, r, name)
			return
		}
		allow = append(allow, rt.method)
	}
	if len(allow) == 0 {
		writeProblem(w, r, problem{status: http.StatusNotFound, code: codeNotFound, detail: "unknown custom method :" + verb})
		return
	}
	methodNotAllowed(w, r, allow)
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	slices.Sort(allow)
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeProblem(w, r, problem{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed,
		detail: r.Method + " is not allowed here; allowed: " + strings.Join(allow, ", ")})
}
