package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const validTokens = `tokens:
  - principal: alice@example.com
    token: "alice-token-0123456789"
  - principal: alice@example.com
    token: alice-token-rotated-9876
    description: the next one
  - principal: ci-runner
    token: "ci+token/abcdefghij=="
`

func request(authorization ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://leases.example.com/v1/leases/x", nil)
	for _, a := range authorization {
		r.Header.Add("Authorization", a)
	}
	return r
}

func TestStaticAuthenticate(t *testing.T) {
	a, err := ParseStatic([]byte(validTokens), "tokens.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		header    []string
		principal string
		errText   string // "" for success
	}{
		{"first token", []string{"Bearer alice-token-0123456789"}, "alice@example.com", ""},
		{"rotated token", []string{"Bearer alice-token-rotated-9876"}, "alice@example.com", ""},
		{"lower-case scheme", []string{"bearer ci+token/abcdefghij=="}, "ci-runner", ""},
		{"upper-case scheme", []string{"BEARER ci+token/abcdefghij=="}, "ci-runner", ""},
		{"wrong token", []string{"Bearer alice-token-0123456780"}, "", "unknown bearer token"},
		{"token prefix", []string{"Bearer alice-token-012345678"}, "", "unknown bearer token"},
		{"token case", []string{"Bearer ALICE-token-0123456789"}, "", "unknown bearer token"},
		{"no header", nil, "", "missing Authorization header"},
		{"empty header", []string{""}, "", "empty Authorization header"},
		{"two headers", []string{"Bearer alice-token-0123456789", "Bearer alice-token-0123456789"}, "", "more than one Authorization header"},
		{"basic", []string{"Basic YWxpY2U6cGFzc3dvcmQ="}, "", "Authorization scheme must be Bearer"},
		{"bare token", []string{"alice-token-0123456789"}, "", "Authorization scheme must be Bearer"},
		{"scheme only", []string{"Bearer"}, "", "empty bearer token"},
		{"scheme and space", []string{"Bearer "}, "", "empty bearer token"},
		{"two tokens", []string{"Bearer alice-token-0123456789 alice-token-0123456789"}, "", `exactly one token`},
		{"two spaces", []string{"Bearer  alice-token-0123456789"}, "", `exactly one token`},
		{"tab", []string{"Bearer\talice-token-0123456789"}, "", "control character U+0009 at byte 7"},
		{"folded line", []string{"Bearer\r\n alice-token-0123456789"}, "", "control character U+000D at byte 7"},
		{"line feed after the token", []string{"Bearer alice-token-0123456789\n"}, "", "control character U+000A"},
		{"NUL", []string{"Bearer alice-token-0123456789\x00"}, "", "control character U+0000"},
		{"DEL", []string{"Bearer alice-token-\x7f0123456789"}, "", "control character U+007F"},
		{"C1 control", []string{"Bearer alice-token-\u00850123456789"}, "", "control character U+0085"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			principal, err := a.Authenticate(request(tt.header...))
			if tt.errText == "" {
				if err != nil || principal != tt.principal {
					t.Fatalf("Authenticate = %q, %v, want %q", principal, err, tt.principal)
				}
				return
			}
			if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tt.errText) {
				t.Fatalf("Authenticate error = %v, want ErrUnauthenticated saying %q", err, tt.errText)
			}
			if principal != "" {
				t.Errorf("principal %q returned with an error", principal)
			}
			if strings.Contains(err.Error(), "token-0123456789") || strings.Contains(err.Error(), "YWxpY2U") {
				t.Errorf("error %q echoes the credentials", err)
			}
		})
	}
}

func TestParseStaticErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", []string{"t.yaml:1:1: empty document"}},
		{"not a mapping", "[]\n", []string{`t.yaml:1:1: want a mapping with the key "tokens", got a list`}},
		{"empty list", "tokens: []\n", []string{"t.yaml:1:9: tokens: empty list (want at least one token)"}},
		{"unknown keys", "tokens:\n  - principal: a\n    token: aaaaaaaaaaaaaaaa\n    secret: x\nversion: 1\n", []string{
			`t.yaml:4:5: tokens[0]: unknown key "secret" (want "principal", "token" or "description")`,
			`t.yaml:5:1: unknown key "version" (want "tokens")`,
		}},
		{"missing fields", "tokens:\n  - principal: a\n  - token: aaaaaaaaaaaaaaaa\n", []string{
			`t.yaml:2:5: tokens[0]: missing key "token"`,
			`t.yaml:3:5: tokens[1]: missing key "principal"`,
		}},
		{"token rules", "tokens:\n  - principal: a\n    token: short-secret\n  - principal: b\n    token: \"has space in the token\"\n  - principal: c\n    token: \"tab\\there-0123456789\"\n  - principal: d\n    token: null\n", []string{
			"t.yaml:3:12: tokens[0].token: token is too short (12 characters, want at least 16)",
			"t.yaml:5:12: tokens[1].token: token contains whitespace",
			"t.yaml:7:12: tokens[2].token: token contains whitespace",
			`t.yaml:9:12: tokens[3].token: want a string, got null (quote it if you mean the text "null")`,
		}},
		{"duplicate tokens", "tokens:\n  - principal: a\n    token: same-token-0123456789\n  - principal: b\n    token: \"same-token-0123456789\"\n", []string{
			"t.yaml:5:12: tokens[1].token: duplicate token (same as tokens[0].token at 3:12)",
		}},
		{"principal rules", "tokens:\n  - principal: \"\"\n    token: aaaaaaaaaaaaaaaa\n  - principal: a b\n    token: bbbbbbbbbbbbbbbb\n  - principal: \"x\\u0000y\"\n    token: cccccccccccccccc\n  - principal: \"*\"\n    token: dddddddddddddddd\n  - principal: [a]\n    token: eeeeeeeeeeeeeeee\n", []string{
			"t.yaml:2:16: tokens[0].principal: empty principal",
			`t.yaml:4:16: tokens[1].principal: principal "a b" contains whitespace`,
			`t.yaml:6:16: tokens[2].principal: principal "x\x00y" contains the non-printable character U+0000`,
			`t.yaml:8:16: tokens[3].principal: principal "*" contains "*" (policies use it as a wildcard)`,
			"t.yaml:10:16: tokens[4].principal: want a string, got a list",
		}},
		// A principal a policy could not name is refused here too.
		{"principals that are not addresses", "tokens:\n  - principal: \"@example.com\"\n    token: aaaaaaaaaaaaaaaa\n  - principal: alice@\n    token: bbbbbbbbbbbbbbbb\n  - principal: a@b@example.com\n    token: cccccccccccccccc\n  - principal: a@example..com\n    token: dddddddddddddddd\n", []string{
			`t.yaml:2:16: tokens[0].principal: principal "@example.com" has nothing before "@": give the whole address, as in "name@example.com"`,
			`t.yaml:4:16: tokens[1].principal: principal "alice@" has no domain after "@": give the whole address, as in "alice@example.com"`,
			`t.yaml:6:16: tokens[2].principal: principal "a@b@example.com" has more than one "@" (want name@domain)`,
			`t.yaml:8:16: tokens[3].principal: principal "a@example..com" has the domain "example..com" with an empty label (a leading, trailing or doubled "."), so it matches no one: write the domain as "example.com"`,
		}},
		{"duplicate key", "tokens:\n  - principal: a\n    principal: b\n    token: aaaaaaaaaaaaaaaa\n", []string{
			`t.yaml:3:5: tokens[0]: duplicate key "principal" (first at 2:5)`,
		}},
		{"json", "{\"tokens\": [\n  {\"principal\": \"a\", \"token\": \"x\"},\n  {\"principal\": \"b\", \"token\": \"yyyyyyyyyyyyyyyy\", \"extra\": true}\n]}\n", []string{
			"t.yaml:2:31: tokens[0].token: token is too short (1 characters, want at least 16)",
			`t.yaml:3:51: tokens[1]: unknown key "extra" (want "principal", "token" or "description")`,
		}},
		{"syntax", "tokens:\n  - principal: a\n    token: 'unterminated\n", []string{
			"t.yaml:3:1: invalid YAML: found unexpected end of stream",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseStatic([]byte(tt.in), "t.yaml")
			if a != nil {
				t.Errorf("ParseStatic returned an authenticator with errors %v", err)
			}
			checkFileErrors(t, err, "t.yaml", tt.want)
			for _, secret := range []string{"short-secret", "same-token", "has space", "aaaaaaaaaaaaaaaa", "yyyyyyyy"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains a token", err)
				}
			}
		})
	}
}

func TestParseStaticMinimumLength(t *testing.T) {
	for _, tt := range []struct {
		token string
		ok    bool
	}{
		{strings.Repeat("x", MinTokenLength-1), false},
		{strings.Repeat("x", MinTokenLength), true},
		{strings.Repeat("é", MinTokenLength), true}, // characters, not bytes
		{strings.Repeat("é", MinTokenLength/2), false},
	} {
		_, err := ParseStatic([]byte("tokens:\n  - principal: a\n    token: "+tt.token+"\n"), "t.yaml")
		if (err == nil) != tt.ok {
			t.Errorf("token of %d characters: err = %v, want ok=%v", len([]rune(tt.token)), err, tt.ok)
		}
	}
}

func TestLoadStatic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, []byte(`{"tokens": [{"principal": "bot", "token": "bot-token-0123456789"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := LoadStatic(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := a.Authenticate(request("Bearer bot-token-0123456789")); err != nil || p != "bot" {
		t.Errorf("Authenticate = %q, %v, want bot", p, err)
	}
	if _, err := LoadStatic(path + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadStatic(missing) = %v, want not-exist", err)
	}
}
