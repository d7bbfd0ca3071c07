package auth

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode"
)

// checkFuzzErrors checks that err is a join of *FileErrors for file whose
// positions lie within data, and that its text is one error per line.
func checkFuzzErrors(t *testing.T, err error, file string, data []byte) {
	t.Helper()
	lines := bytes.Count(data, []byte("\n")) + 1
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T %q is not a join of errors", err, err)
	}
	errs := joined.Unwrap()
	if len(errs) == 0 {
		t.Fatal("empty error join")
	}
	for _, e := range errs {
		fe, ok := e.(*FileError)
		if !ok {
			t.Fatalf("error %T %q is not a *FileError", e, e)
		}
		if fe.File != file || fe.Line < 1 || fe.Line > lines || fe.Column < 1 {
			t.Fatalf("error %q: position %d:%d outside the input's %d lines", fe, fe.Line, fe.Column, lines)
		}
		if strings.Contains(fe.Error(), "\n") {
			t.Fatalf("error %q spans lines", fe)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(validPolicy), "alice@example.com", "acquire", "team-a.x")
	f.Fuzz(func(t *testing.T, data []byte, principal, verb, name string) {
		p, err := ParsePolicy(data, "policy.yaml")
		if err != nil {
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			checkFuzzErrors(t, err, "policy.yaml", data)
			return
		}
		v := Verb(verb)
		allowed := p.Allowed(principal, v, name)
		all, some := p.ListScope(principal, v, name)
		if all && !some {
			t.Fatal("ListScope: all without some")
		}
		// name is itself the first name under the prefix name.
		if all && !allowed {
			t.Fatalf("ListScope(%q) covers all of %q but Allowed is false", principal, name)
		}
		if allowed && !some {
			t.Fatalf("Allowed(%q, %q) but ListScope finds nothing under it", principal, name)
		}
		if allowed {
			if _, some := p.ListScope(principal, v, ""); !some {
				t.Fatal("Allowed but ListScope of every name finds nothing")
			}
			for _, w := range []Verb{Read, Acquire, Admin} {
				if v.Implies(w) && !p.Allowed(principal, w, name) {
					t.Fatalf("%s allowed but implied %s denied", v, w)
				}
			}
		}
		if !v.Valid() && (allowed || some) {
			t.Fatalf("invalid verb %q granted", verb)
		}
		if principal == "" && (allowed || some) {
			t.Fatal("empty principal granted")
		}
	})
}

func FuzzParseStatic(f *testing.F) {
	f.Add([]byte(validTokens), "Bearer alice-token-0123456789")
	f.Fuzz(func(t *testing.T, data []byte, authorization string) {
		a, err := ParseStatic(data, "tokens.yaml")
		if err != nil {
			if a != nil {
				t.Fatal("authenticator returned with an error")
			}
			checkFuzzErrors(t, err, "tokens.yaml", data)
			return
		}
		r := request()
		r.Header = http.Header{"Authorization": {authorization}}
		principal, err := a.Authenticate(r)
		switch {
		case err == nil && (principal == "" || badText(principal) != ""):
			t.Fatalf("bad principal %q", principal)
		case err != nil && (principal != "" || !errors.Is(err, ErrUnauthenticated)):
			t.Fatalf("Authenticate = %q, %v", principal, err)
		case err != nil:
			// Error texts are fixed; a token with a digit cannot be
			// part of one by chance.
			_, token, _ := strings.Cut(authorization, " ")
			if strings.ContainsFunc(token, unicode.IsDigit) && strings.Contains(err.Error(), token) {
				t.Fatalf("error %q echoes the token", err)
			}
		}
	})
}
