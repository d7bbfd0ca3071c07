package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
)

// TestOpenAPIMatchesRoutes fails when a route and the OpenAPI document
// disagree: every route is documented with its method, every documented
// operation is served (not 404 or 405), and the document is valid JSON
// served at /openapi.json.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	var served []string
	for _, r := range httpapi.Routes() {
		served = append(served, r.Method+" "+r.Pattern)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("routes and OpenAPI disagree:\nserved:     %v\ndocumented: %v", served, documented)
	}

	h := newHandler(t, memory.New())
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		path = strings.ReplaceAll(path, "{name}", "doc-check")
		var body *strings.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{}`)
		} else {
			body = strings.NewReader("")
		}
		w := httptest.NewRecorder()
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond) // ends a :watch stream
		h.ServeHTTP(w, apiRequest(method, path, body).WithContext(ctx))
		cancel()
		if w.Code == http.StatusMethodNotAllowed || (w.Code == http.StatusNotFound && !strings.Contains(w.Body.String(), "no such lease")) {
			t.Errorf("documented %s answers %d %s", op, w.Code, w.Body)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if w.Code != 200 || w.Body.String() != string(httpapi.OpenAPI) {
		t.Fatalf("GET /openapi.json = %d, want the document", w.Code)
	}
}
