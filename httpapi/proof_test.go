package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/internal/proofkey"
	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/session"
)

func newIssuer(t *testing.T, store backend.Store, instance string) *proofkey.Issuer {
	t.Helper()
	i, err := proofkey.Publish(t.Context(), store, proofkey.Config{Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// call answers one request of the handler, decoding a JSON body.
func call(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, apiRequest(method, path, rd))
	var m map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &m)
	return w.Code, m
}

// verifier reads the JWKS route of h, as a sink without network would
// keep it, asking for kid.
func verifier(t *testing.T, h http.Handler, kid string) *fence.Verifier {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "http://leasesvc.example"+httpapi.JWKSPath+"?kid="+kid, nil)) // public: any Host
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/jwk-set+json" {
		t.Fatalf("JWKS: %d %s %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	keys, err := fence.ParseJWKS(w.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := fence.NewVerifier(keys, proofkey.DefaultIssuer)
	return v
}

// TestProofREST: the acquire answer carries a proof of exactly that
// holding, which verifies with the JWKS route's keys; renew, get and list
// carry none; the key records are found by no route.
func TestProofREST(t *testing.T) {
	store := memory.New()
	iss := newIssuer(t, store, "i1")
	m, _ := lease.NewManager(store, lease.Config{})
	h, err := httpapi.New(m, httpapi.Config{Proofs: iss, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	code, l := call(t, h, "POST", "/v1/leases/orders:acquire", `{"holder":"w1","ttlMs":60000}`)
	proof, _ := l["proof"].(string)
	if code != 200 || proof == "" {
		t.Fatalf("acquire: %d %v", code, l)
	}
	c, err := verifier(t, h, "").Verify(t.Context(), proof)
	if err != nil {
		t.Fatalf("the acquire's proof: %v", err)
	}
	if c.Lease != "orders" || c.Holder != "w1" || float64(c.FencingToken) != l["fencingToken"] || c.Issuer != "leasesvc" {
		t.Fatalf("claims %+v of lease %v", c, l)
	}
	for _, req := range []struct{ method, path, body string }{
		{"POST", "/v1/leases/orders:renew", `{"holder":"w1","fencingToken":1}`},
		{"GET", "/v1/leases/orders", ""},
	} {
		if code, got := call(t, h, req.method, req.path, req.body); code != 200 || got["proof"] != nil {
			t.Errorf("%s %s: %d, proof %v; want 200 without a proof", req.method, req.path, code, got["proof"])
		}
	}
	code, page := call(t, h, "GET", "/v1/leases", "")
	if ls, _ := page["leases"].([]any); code != 200 || len(ls) != 1 || ls[0].(map[string]any)["proof"] != nil {
		t.Fatalf("list: %d %v; want the one lease, without a proof or the key record", code, page)
	}
	if code, _ := call(t, h, "GET", "/v1/leases/"+lease.KeyRecordPrefix+iss.Kid(), ""); code != 404 {
		t.Errorf("get of the key record: %d, want 404", code)
	}
	if code, _ := call(t, h, "POST", "/v1/leases/"+lease.KeyRecordPrefix+iss.Kid()+":renew", `{"holder":"i1","fencingToken":1,"metadata":{}}`); code != 404 {
		t.Errorf("renew of the key record: %d, want 404", code)
	}
	if code, _ := call(t, h, "POST", "/v1/leases/"+lease.KeyRecordPrefix+"x:acquire", `{"holder":"h","ttlMs":60000}`); code != 400 {
		t.Errorf("acquire of a key record name: %d, want 400", code)
	}
}

// TestJWKSPublic: with authentication on, the JWKS route answers a
// request without credentials, like OIDC discovery; a lease route does not.
func TestJWKSPublic(t *testing.T) {
	store := memory.New()
	iss := newIssuer(t, store, "i1")
	m, _ := lease.NewManager(store, lease.Config{})
	h, err := httpapi.New(m, httpapi.Config{Proofs: iss, Authenticator: tokenAuth{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, h, iss.Kid())
	p, _ := iss.Sign(lease.Lease{Record: lease.Record{Name: "a", Holder: "h", FencingToken: 1}})
	if _, err := v.Verify(t.Context(), p); err != nil {
		t.Fatalf("a proof through the JWKS served without credentials: %v", err)
	}
	if code, _ := call(t, h, "GET", "/v1/leases/a", ""); code != 401 {
		t.Fatalf("a lease route without credentials: %d, want 401", code)
	}
}

// TestProofSession: a session acquire's result and a resume's leases on
// another instance carry proofs; each verifies through the other
// instance's JWKS (an unknown kid reads the backend).
func TestProofSession(t *testing.T) {
	store := memory.New()
	ia, ib := newIssuer(t, store, "a"), newIssuer(t, store, "b")
	a := newSessionInstance(t, store, session.Config{}, httpapi.Config{Proofs: ia})
	b := newSessionInstance(t, store, session.Config{}, httpapi.Config{Proofs: ib})
	wa := dial(t, a.srv.URL, "")
	op := wa.open(1000)
	wa.send("acquire", map[string]any{"name": "a", "holder": "h"})
	l := wa.expect("result")["lease"].(map[string]any)
	ca, err := verifier(t, b.h, ia.Kid()).Verify(t.Context(), l["proof"].(string))
	if err != nil || ca.Lease != "a" || float64(ca.FencingToken) != l["fencingToken"] {
		t.Fatalf("session acquire's proof through b's JWKS: %+v, %v", ca, err)
	}
	wb := dial(t, b.srv.URL, "")
	wb.send("resume", map[string]any{"sessionId": op["sessionId"], "epoch": 2,
		"leases": []any{map[string]any{"name": "a", "holder": "h", "fencingToken": l["fencingToken"]}}})
	rl := wb.expect("resumed")["leases"].([]any)[0].(map[string]any)
	cb, err := verifier(t, a.h, ib.Kid()).Verify(t.Context(), rl["proof"].(string))
	if err != nil || cb.Lease != "a" || float64(cb.FencingToken) != rl["fencingToken"] {
		t.Fatalf("resume's proof through a's JWKS: %+v, %v", cb, err)
	}
}
