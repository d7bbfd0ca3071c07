package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Response is one HTTP answer, decoded when it is JSON.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header is the response header.
	Header http.Header
	// Body is the decoded JSON object, or nil.
	Body map[string]any
	// Raw is the body as received.
	Raw string
}

// Code returns the problem code of an error answer.
func (r Response) Code() string { s, _ := r.Body["code"].(string); return s }

// Lease returns the lease of an answer: the body itself, or its "lease"
// member for a lease_held problem.
func (r Response) Lease() map[string]any {
	if l, ok := r.Body["lease"].(map[string]any); ok {
		return l
	}
	return r.Body
}

// Token returns the fencing token of the answer's lease.
func (r Response) Token() int64 { f, _ := r.Lease()["fencingToken"].(float64); return int64(f) }

// Holder returns the holder of the answer's lease.
func (r Response) Holder() string { s, _ := r.Lease()["holder"].(string); return s }

// Client sends requests to one service.
type Client struct {
	// URL is the service's base URL.
	URL string
	// Token, if set, is sent as Authorization: Bearer Token.
	Token string
}

// Do sends a request; contentType "" sends none.
func (c Client) Do(t testing.TB, method, path, contentType, body string) Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, c.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := &http.Client{Timeout: 90 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	_ = json.Unmarshal(raw, &out.Body)
	return out
}

// Post sends a JSON body.
func (c Client) Post(t testing.TB, path, body string) Response {
	t.Helper()
	return c.Do(t, http.MethodPost, path, "application/json", body)
}

// Get sends a GET.
func (c Client) Get(t testing.TB, path string) Response {
	t.Helper()
	return c.Do(t, http.MethodGet, path, "", "")
}
