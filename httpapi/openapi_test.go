package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/session"
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
	withSessions := newSessionInstance(t, memory.New(), session.Config{}, httpapi.Config{}).srv.Config.Handler
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
		if path == httpapi.SessionsPath {                                     // without sessions the route is 404
			withSessions.ServeHTTP(w, apiRequest(method, path, body).WithContext(ctx))
		} else {
			h.ServeHTTP(w, apiRequest(method, path, body).WithContext(ctx))
		}
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

// TestOpenAPILeaseMatchesWire fails when the lease JSON and the OpenAPI
// Lease schema disagree: every member the wire form can carry is a
// property of the schema (which allows no others) and every property is
// one the wire form carries; and every problem code the service answers
// with is in the Problem schema's enum.
func TestOpenAPILeaseMatchesWire(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	schema := doc.Components.Schemas["Lease"].Properties
	members := map[string]bool{}
	for f := range reflect.TypeFor[wire.Lease]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		members[name] = true
		if _, ok := schema[name]; !ok {
			t.Errorf("lease member %q is not in the OpenAPI Lease schema", name)
		}
	}
	for name := range schema {
		if !members[name] {
			t.Errorf("OpenAPI Lease has %q, which the lease JSON never carries", name)
		}
	}
	codes := doc.Components.Schemas["Problem"].Properties["code"].Enum
	for _, code := range []string{"lease_held", "lease_lost", "lease_reserved", "session_held", "invalid_argument"} {
		if !slices.Contains(codes, code) {
			t.Errorf("problem code %q is not in the OpenAPI Problem enum %v", code, codes)
		}
	}
}
