package httpapi

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// uiFiles is the dashboard (docs/contract.md §11): plain HTML, CSS and
// JavaScript, no build step, nothing loaded from elsewhere.
//
//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

// uiPath is where the dashboard is served.
const uiPath = "/ui/"

// extraRoutes registers the routes that the OpenAPI document does not list
// as operations of their own: HEAD of the prefix stream, and the dashboard.
func (a *api) extraRoutes(r chi.Router) {
	sub, _ := fs.Sub(uiFiles, "ui")
	files := http.StripPrefix(uiPath, http.FileServerFS(sub))
	ui := func(w http.ResponseWriter, r *http.Request) {
		routed(r, uiPath, "", "")
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		r.Method(m, uiPath, http.HandlerFunc(ui))
		r.Method(m, uiPath+"{file}", http.HandlerFunc(ui))
		r.Method(m, "/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			to := uiPath
			if r.URL.RawQuery != "" {
				to += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, to, http.StatusMovedPermanently)
		}))
	}
}
