package httpapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of the API, served at /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(OpenAPI)
}
