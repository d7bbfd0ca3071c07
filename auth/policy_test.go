package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// errorLines returns err's text split into lines (one per joined error).
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

// checkFileErrors checks that err is exactly the problems want, in order, and
// that each is a *FileError with the file name.
func checkFileErrors(t *testing.T, err error, file string, want []string) {
	t.Helper()
	got := errorLines(err)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FileError", err)
	}
	if fe.File != file || fe.Line < 1 || fe.Column < 1 {
		t.Errorf("first FileError = %+v, want file %q and a position", fe, file)
	}
}

const validPolicy = `grants:
  - principals: [alice@example.com, "*@Team-A.example.com"]
    verbs: [acquire]
    prefixes: [team-a.]
  - principals: ["*"]
    verbs: [read]
    prefixes: [public.]
  - principals: [ops@example.com]
    verbs: [admin]
    prefixes: ["*"]
  - principals: [ci-runner]
    verbs: [read, acquire]
    prefixes: [ci., team-a.builds.]
    description: CI only touches its own leases
`

func TestParsePolicyErrors(t *testing.T) {
	long := strings.Repeat("a", MaxPrefixLength+1)
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty file", "", []string{
			"p.yaml:1:1: empty document",
		}},
		{"only comments", "# nothing\n\n# here\n", []string{
			"p.yaml:1:1: empty document",
		}},
		{"null document", "---\n~\n", []string{
			`p.yaml:2:1: want a mapping with the key "grants", got null`,
		}},
		{"list document", "- principals: [a]\n", []string{
			`p.yaml:1:1: want a mapping with the key "grants", got a list`,
		}},
		{"two documents", "grants: []\n---\ngrants: []\n", []string{
			"p.yaml:2:1: more than one YAML document (want exactly one)",
		}},
		{"missing grants", "{}\n", []string{
			`p.yaml:1:1: missing key "grants"`,
		}},
		{"unknown top-level key", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: ['*']\nrules: []\n", []string{
			`p.yaml:5:1: unknown key "rules" (want "grants")`,
		}},
		{"duplicate top-level key", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: ['*']\ngrants: []\n", []string{
			`p.yaml:5:1: duplicate key "grants" (first at 1:1)`,
		}},
		{"grants null", "grants:\n", []string{
			"p.yaml:1:8: grants: want a list, got null",
		}},
		{"grants empty", "grants: []\n", []string{
			"p.yaml:1:9: grants: empty list (want at least one grant)",
		}},
		{"grants a mapping", "grants:\n  principals: [a]\n", []string{
			"p.yaml:2:3: grants: want a list, got a mapping",
		}},
		{"grant a string", "grants:\n  - alice\n", []string{
			`p.yaml:2:5: grants[0]: want a mapping with keys "principals", "verbs", "prefixes" and "description", got a string`,
		}},
		{"missing fields", "grants:\n  - description: nothing granted\n", []string{
			`p.yaml:2:5: grants[0]: missing key "principals"`,
			`p.yaml:2:5: grants[0]: missing key "verbs"`,
			`p.yaml:2:5: grants[0]: missing key "prefixes"`,
		}},
		{"unknown verb", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: ['*']\n  - principals: [b]\n    verbs:\n      - write\n    prefixes: ['*']\n", []string{
			// The example of the brief: line 7, column 9.
			`p.yaml:7:9: grants[1].verbs[0]: unknown verb "write" (want "read", "acquire", "delete" or "admin")`,
		}},
		{"verbs are case-sensitive", "grants:\n  - principals: [a]\n    verbs: [Read]\n    prefixes: ['*']\n", []string{
			`p.yaml:3:13: grants[0].verbs[0]: unknown verb "Read" (want "read", "acquire", "delete" or "admin")`,
		}},
		{"unknown grant key and scalar lists", "grants:\n  - principals: a\n    verbs: read\n    prefix: x\n    prefixes: {a: 1}\n", []string{
			"p.yaml:2:17: grants[0].principals: want a list, got a string",
			"p.yaml:3:12: grants[0].verbs: want a list, got a string",
			`p.yaml:4:5: grants[0]: unknown key "prefix" (want "principals", "verbs", "prefixes" or "description")`,
			"p.yaml:5:15: grants[0].prefixes: want a list, got a mapping",
		}},
		{"empty lists", "grants:\n  - principals: []\n    verbs: []\n    prefixes: []\n", []string{
			"p.yaml:2:17: grants[0].principals: empty list (want at least one principal)",
			"p.yaml:3:12: grants[0].verbs: empty list (want at least one verb)",
			"p.yaml:4:15: grants[0].prefixes: empty list (want at least one prefix)",
		}},
		// Principals that match no one, each on its own line, with the
		// form meant.
		{"principals that match no one", "grants:\n  - principals:\n      - \"@example.com\"\n      - alice@\n      - \"@\"\n      - a@@example.com\n      - alice@example..com\n      - alice@example.com.\n      - \"*@.example.com\"\n      - \"*@*.example.com\"\n      - \"*.example.com\"\n      - \"*example.com\"\n      - \"*@example.com.\"\n      - \" alice@example.com\"\n      - \"*@ example.com\"\n      - \"@.\"\n    verbs: [read]\n    prefixes: ['*']\n", []string{
			`p.yaml:3:9: grants[0].principals[0]: principal "@example.com" has nothing before "@", so it matches no one: for everyone at example.com write "*@example.com", or give the whole address, as in "name@example.com"`,
			`p.yaml:4:9: grants[0].principals[1]: principal "alice@" has no domain after "@": give the whole address, as in "alice@example.com"`,
			`p.yaml:5:9: grants[0].principals[2]: principal "@" is not an address (want name@domain)`,
			`p.yaml:6:9: grants[0].principals[3]: principal "a@@example.com" has more than one "@" (want name@domain)`,
			`p.yaml:7:9: grants[0].principals[4]: principal "alice@example..com" has the domain "example..com" with an empty label (a leading, trailing or doubled "."), so it matches no one: write the domain as "example.com"`,
			`p.yaml:8:9: grants[0].principals[5]: principal "alice@example.com." has the domain "example.com." with an empty label (a leading, trailing or doubled "."), so it matches no one: write the domain as "example.com"`,
			`p.yaml:9:9: grants[0].principals[6]: principal "*@.example.com": a domain grant covers one domain exactly, there are no subdomain wildcards: list "*@example.com" and each subdomain, as "*@sub.example.com"`,
			`p.yaml:10:9: grants[0].principals[7]: principal "*@*.example.com": a domain grant covers one domain exactly, there are no subdomain wildcards: list "*@example.com" and each subdomain, as "*@sub.example.com"`,
			`p.yaml:11:9: grants[0].principals[8]: principal "*.example.com": "*" is only allowed as "*" (anyone) or "*@domain"; for everyone at example.com write "*@example.com"`,
			`p.yaml:12:9: grants[0].principals[9]: principal "*example.com": "*" is only allowed as "*" (anyone) or "*@domain"; for everyone at example.com write "*@example.com"`,
			`p.yaml:13:9: grants[0].principals[10]: principal "*@example.com." has the domain "example.com." with an empty label (a leading, trailing or doubled "."), so it matches no one: write the domain as "example.com"`,
			`p.yaml:14:9: grants[0].principals[11]: principal " alice@example.com" contains whitespace`,
			`p.yaml:15:9: grants[0].principals[12]: principal "*@ example.com" contains whitespace`,
			`p.yaml:16:9: grants[0].principals[13]: principal "@." is not an address (want name@domain)`,
		}},
		{"bad principals", "grants:\n  - principals: [\"a b\", 'x*y', '*@', '*@a@b', '', \"bell\\a\", null, true, [a]]\n    verbs: [read]\n    prefixes: ['*']\n", []string{
			`p.yaml:2:18: grants[0].principals[0]: principal "a b" contains whitespace`,
			`p.yaml:2:25: grants[0].principals[1]: principal "x*y": "*" is only allowed as "*" (anyone) or "*@domain"`,
			`p.yaml:2:32: grants[0].principals[2]: principal "*@": "*@" needs a domain, as in "*@example.com"`,
			`p.yaml:2:38: grants[0].principals[3]: principal "*@a@b": the domain of "*@domain" must not contain "@" or "*"`,
			`p.yaml:2:47: grants[0].principals[4]: empty principal`,
			`p.yaml:2:51: grants[0].principals[5]: principal "bell\a" contains the non-printable character U+0007`,
			`p.yaml:2:61: grants[0].principals[6]: want a string, got null (quote it if you mean the text "null")`,
			`p.yaml:2:67: grants[0].principals[7]: want a string, got a boolean (quote it if you mean the text "true")`,
			`p.yaml:2:73: grants[0].principals[8]: want a string, got a list`,
		}},
		{"bad prefixes", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: [-x, .x, x/y, '', " + long + "]\n", []string{
			`p.yaml:4:16: grants[0].prefixes[0]: prefix "-x" must start with a letter or digit (or be "*" for every name)`,
			`p.yaml:4:20: grants[0].prefixes[1]: prefix ".x" must start with a letter or digit (or be "*" for every name)`,
			`p.yaml:4:24: grants[0].prefixes[2]: prefix "x/y": want only letters, digits, '.', '_' and '-'`,
			`p.yaml:4:29: grants[0].prefixes[3]: empty prefix (use "*" for every name)`,
			`p.yaml:4:33: grants[0].prefixes[4]: prefix is 129 characters long, want at most 128`,
		}},
		{"duplicates in lists and keys", "grants:\n  - principals: [a, b, a]\n    verbs: [read, read]\n    prefixes: [x., x.]\n    verbs: [admin]\n", []string{
			`p.yaml:2:24: grants[0].principals[2]: duplicate "a" (first at 2:18)`,
			`p.yaml:3:19: grants[0].verbs[1]: duplicate "read" (first at 3:13)`,
			`p.yaml:4:20: grants[0].prefixes[1]: duplicate "x." (first at 4:16)`,
			`p.yaml:5:5: grants[0]: duplicate key "verbs" (first at 3:5)`,
		}},
		{"anchors and aliases", "grants:\n  - &g\n    principals: [a]\n    verbs: [read]\n    prefixes: ['*']\n  - *g\n", []string{
			"p.yaml:2:5: grants[0]: anchors (&g) are not supported",
			"p.yaml:6:5: grants[1]: aliases (*g) are not supported",
		}},
		{"merge key", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: ['*']\n    <<: {description: x}\n", []string{
			`p.yaml:5:5: grants[0]: unknown key "<<" (want "principals", "verbs", "prefixes" or "description")`,
		}},
		{"custom tag and binary", "grants:\n  - principals: [!who a]\n    verbs: [!!binary cmVhZA==]\n    prefixes: !!set {a}\n", []string{
			"p.yaml:2:18: grants[0].principals[0]: want a string, got a value tagged !who",
			"p.yaml:3:13: grants[0].verbs[0]: want a string, got binary data",
			"p.yaml:4:15: grants[0].prefixes: want a list, got a mapping",
		}},
		{"non-string key", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: ['*']\n    [x]: 1\n", []string{
			"p.yaml:5:5: grants[0]: want a string key, got a list",
		}},
		{"description not text", "grants:\n  - principals: [a]\n    verbs: [read]\n    prefixes: ['*']\n    description: [x]\n", []string{
			"p.yaml:5:18: grants[0].description: want a string, got a list",
		}},
		{"yaml syntax error", "grants:\n  - principals: [a\n    verbs: [read]\n", []string{
			// yaml.v3 reports where the unclosed flow list starts.
			"p.yaml:2:1: invalid YAML: did not find expected ',' or ']'",
		}},
		{"unterminated at the end of a file without newline", "grants: [", []string{
			"p.yaml:1:1: invalid YAML: did not find expected node content",
		}},
		{"yaml scanner error", "grants:\n  - principals: [a]\n\tverbs: [read]\n", []string{
			"p.yaml:3:1: invalid YAML: found character that cannot start any token",
		}},
		{"yaml error on the first line", "grants: a: b\n", []string{
			"p.yaml:1:1: invalid YAML: mapping values are not allowed in this context",
		}},
		{"json syntax error", "{\n  \"grants\": [\n    {\"principals\": [\"a\"],, \"verbs\": [\"read\"]}\n  ]\n}\n", []string{
			"p.yaml:3:26: invalid JSON: invalid character ',' looking for beginning of object key string",
		}},
		{"json truncated", "{\"grants\": [\n", []string{
			"p.yaml:2:1: invalid JSON: unexpected end of JSON input",
		}},
		{"json errors carry lines", "{\n  \"grants\": [\n    {\n      \"principals\": [\"alice@example.com\"],\n      \"verbs\": [\"read\", \"write\"],\n      \"prefixes\": \"team-a.\"\n    }\n  ]\n}\n", []string{
			`p.yaml:5:25: grants[0].verbs[1]: unknown verb "write" (want "read", "acquire", "delete" or "admin")`,
			"p.yaml:6:19: grants[0].prefixes: want a list, got a string",
		}},
		{"json with tabs and duplicate key", "{\n\t\"grants\": [{\"principals\": [\"a\"], \"verbs\": [\"read\"], \"prefixes\": [\"*\"]}],\n\t\"grants\": []\n}\n", []string{
			`p.yaml:3:2: duplicate key "grants" (first at 2:2)`,
		}},
		{"invalid UTF-8", "grants:\n  - principals: [\xff]\n", []string{
			"p.yaml:2:18: invalid UTF-8 (the file must be UTF-8 text)",
		}},
		{"control character", "grants:\n  - principals: [é\x01]\n", []string{
			"p.yaml:2:19: control character U+0001 is not allowed",
		}},
		{"columns count characters", "grants:\n  - principals: [éé, \"a b\"]\n    verbs: [read]\n    prefixes: ['*']\n", []string{
			`p.yaml:2:22: grants[0].principals[1]: principal "a b" contains whitespace`,
		}},
		{"json columns count characters", "{\"grants\": [{\"principals\": [\"éé\"],, }]}", []string{
			"p.yaml:1:35: invalid JSON: invalid character ',' looking for beginning of object key string",
		}},
		{"lone carriage return", "grants:\r  - principals: [a]\n", []string{
			"p.yaml:1:8: carriage return not followed by a line feed",
		}},
		{"unicode line separator", "grants: []\u2028\n", []string{
			"p.yaml:1:11: unsupported line break U+2028 (use \\n)",
		}},
		{"CRLF keeps positions", "grants:\r\n  - principals: [a]\r\n    verbs: [write]\r\n    prefixes: ['*']\r\n", []string{
			`p.yaml:3:13: grants[0].verbs[0]: unknown verb "write" (want "read", "acquire", "delete" or "admin")`,
		}},
		{"problems of several grants at once", "grants:\n  - principals: [a]\n    verbs: [read]\n  - principals: [b]\n    verbs: [nope]\n    prefixes: ['*']\n  - 7\n", []string{
			`p.yaml:2:5: grants[0]: missing key "prefixes"`,
			`p.yaml:5:13: grants[1].verbs[0]: unknown verb "nope" (want "read", "acquire", "delete" or "admin")`,
			`p.yaml:7:5: grants[2]: want a mapping with keys "principals", "verbs", "prefixes" and "description", got a number`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.in), "p.yaml")
			if p != nil {
				t.Errorf("ParsePolicy returned a policy with errors %v", err)
			}
			checkFileErrors(t, err, "p.yaml", tt.want)
		})
	}
}

func TestParsePolicyAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"yaml", validPolicy},
		{"json", `{"grants": [{"principals": ["a@x.org"], "verbs": ["read"], "prefixes": ["*"]}]}`},
		{"byte order mark", "\uFEFFgrants: [{principals: [a], verbs: [read], prefixes: ['*']}]\n"},
		{"explicit document markers", "---\ngrants: [{principals: [a], verbs: [read], prefixes: ['*']}]\n...\n"},
		{"numbers and dates as text", "grants: [{principals: [12345], verbs: [read], prefixes: [2024, 2024-01-01, 1.5, 0x1f]}]\n"},
		{"redundant verbs and prefixes", "grants: [{principals: [a], verbs: [read, admin], prefixes: ['*', x.]}]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePolicy([]byte(tt.in), "p.yaml")
			if err != nil || p == nil {
				t.Fatalf("ParsePolicy: %v", err)
			}
		})
	}
	t.Run("numbers keep their text", func(t *testing.T) {
		p, err := ParsePolicy([]byte("grants: [{principals: [12345], verbs: [read], prefixes: [007, 2024-01-01]}]\n"), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"007.x": true, "7.x": false, "2024-01-01.a": true, "2024.a": false} {
			if got := p.Allowed("12345", Read, name); got != want {
				t.Errorf("Allowed(12345, read, %q) = %v, want %v", name, got, want)
			}
		}
	})
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte("grants:\n  - principals: [a]\n    verbs: [write]\n    prefixes: ['*']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadPolicy(path)
	checkFileErrors(t, err, path, []string{path + `:3:13: grants[0].verbs[0]: unknown verb "write" (want "read", "acquire", "delete" or "admin")`})

	_, err = LoadPolicy(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "auth: read policy file") {
		t.Errorf("LoadPolicy(missing) = %v, want a wrapped not-exist error", err)
	}
}
