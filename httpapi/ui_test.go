package httpapi_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/backend/memory"
)

// TestDashboardLoadsNothingFromElsewhere: the dashboard's files name no
// other origin (no CDN, no web font, no external script), its policy
// allows only 'self', and /ui redirects to /ui/ keeping the query.
func TestDashboardLoadsNothingFromElsewhere(t *testing.T) {
	srv := httptest.NewServer(newHandler(t, memory.New()))
	defer srv.Close()
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|@font-face`)
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) < 100 {
			t.Fatalf("GET %s = %d, %d bytes", path, resp.StatusCode, len(body))
		}
		if m := external.Find(body); m != nil {
			t.Errorf("%s refers to another origin: %q", path, m)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "http") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(srv.URL + "/ui?prefix=team-a.")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/?prefix=team-a." {
		t.Fatalf("GET /ui = %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestDashboardLegendShowsHolderHues: timelines draw each term in its
// holder's hue (app.js HUES), so the legend's term swatch shows several of
// those hues and says one colour per holder, rather than one blue.
func TestDashboardLegendShowsHolderHues(t *testing.T) {
	srv := httptest.NewServer(newHandler(t, memory.New()))
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	css, js, html := get("/ui/style.css"), get("/ui/app.js"), get("/ui/")
	rule := regexp.MustCompile(`\.sw-term\s*\{([^}]*)\}`).FindStringSubmatch(css)
	if rule == nil {
		t.Fatal("style.css has no .sw-term rule")
	}
	palette := regexp.MustCompile(`const HUES = \[([0-9, ]+)\]`).FindStringSubmatch(js)
	if palette == nil {
		t.Fatal("app.js has no HUES palette")
	}
	hues := map[string]bool{}
	for _, h := range strings.Split(palette[1], ",") {
		hues[strings.TrimSpace(h)] = true
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`hsl\((\d+) `).FindAllStringSubmatch(rule[1], -1) {
		if !hues[m[1]] {
			t.Errorf(".sw-term uses hue %s, which is no holder's (HUES %s)", m[1], palette[1])
		}
		seen[m[1]] = true
	}
	if len(seen) < 2 {
		t.Errorf(".sw-term {%s} shows %d hue(s), want several holders' hues", rule[1], len(seen))
	}
	if !strings.Contains(html, "one colour per holder") {
		t.Error("the legend does not say that terms have one colour per holder")
	}
}
