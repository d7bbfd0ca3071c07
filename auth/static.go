package auth

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// MinTokenLength is the shortest static token accepted, in characters.
const MinTokenLength = 16

// static authenticates requests by the bearer tokens of a tokens file. It
// keeps only the SHA-256 of each token and looks tokens up by that digest, so
// the time a lookup takes does not depend on how much of a known token a
// guess matches.
type static struct {
	byDigest map[[sha256.Size]byte]string // SHA-256 of the token → principal
}

var _ Authenticator = (*static)(nil)

// LoadStatic reads the tokens file at path and parses it with ParseStatic.
func LoadStatic(path string) (Authenticator, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read tokens file: %w", err)
	}
	return ParseStatic(data, path)
}

// ParseStatic parses a tokens file (YAML, or JSON, which is YAML) and returns
// an Authenticator that accepts exactly its tokens. filename is used only in
// error messages. Every problem is reported at once, as the errors.Join of
// *FileError values formatted "FILE:LINE:COL: PATH: MESSAGE"; messages never
// contain a token.
func ParseStatic(data []byte, filename string) (Authenticator, error) {
	s, err := parseStatic(data, filename)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func parseStatic(data []byte, filename string) (*static, error) {
	c := newChecker(filename, data)
	root := c.document(data)
	if root == nil {
		return nil, c.err()
	}
	s := &static{byDigest: make(map[[sha256.Size]byte]string)}
	top := c.fields(root, "", []string{"tokens"}, []string{"tokens"})
	type origin struct {
		path      string
		line, col int
	}
	seen := make(map[[sha256.Size]byte]origin)
	for i, item := range c.list(top["tokens"], "tokens", "one token") {
		path := fmt.Sprintf("tokens[%d]", i)
		f := c.fields(item, path, []string{"principal", "token", "description"}, []string{"principal", "token"})
		if f == nil {
			continue
		}
		principal, pok := c.staticPrincipal(f["principal"], path+".principal")
		token, tok := c.staticToken(f["token"], path+".token")
		if d := f["description"]; d != nil {
			c.str(d, path+".description")
		}
		if !tok {
			continue
		}
		digest := sha256.Sum256([]byte(token))
		if first, dup := seen[digest]; dup {
			n := f["token"]
			c.errorf(n, path+".token", "duplicate token (same as %s at %d:%d)", first.path, first.line, first.col)
			continue
		}
		seen[digest] = origin{path: path + ".token", line: f["token"].Line, col: f["token"].Column}
		if pok {
			s.byDigest[digest] = principal
		}
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// staticPrincipal reads a tokens file principal: non-empty printable text
// without whitespace or "*" (which policies use as a wildcard), and, if it
// has an "@", of the form name@domain, as a policy principal must be
// (addressProblem), so that a policy can name it.
func (c *checker) staticPrincipal(n *yaml.Node, path string) (string, bool) {
	p, ok := c.str(n, path)
	if !ok {
		return "", false
	}
	switch bad, addr := badText(p), addressProblem(p, false); {
	case p == "":
		c.errorf(n, path, "empty principal")
	case bad != "":
		c.errorf(n, path, "principal %q %s", p, bad)
	case strings.Contains(p, "*"):
		c.errorf(n, path, "principal %q contains \"*\" (policies use it as a wildcard)", p)
	case addr != "":
		c.errorf(n, path, "%s", addr)
	default:
		return p, true
	}
	return "", false
}

// staticToken reads a token: at least MinTokenLength printable characters
// without whitespace. Messages never quote the token.
func (c *checker) staticToken(n *yaml.Node, path string) (string, bool) {
	t, ok := c.str(n, path)
	if !ok {
		return "", false
	}
	if bad := badText(t); bad != "" {
		c.errorf(n, path, "token %s", bad)
		return "", false
	}
	if l := utf8.RuneCountInString(t); l < MinTokenLength {
		c.errorf(n, path, "token is too short (%d characters, want at least %d)", l, MinTokenLength)
		return "", false
	}
	return t, true
}

// Authenticate returns the principal whose token r carries.
func (s *static) Authenticate(r *http.Request) (string, error) {
	token, err := bearerToken(r)
	if err != nil {
		return "", err
	}
	principal, ok := s.byDigest[sha256.Sum256([]byte(token))]
	if !ok {
		return "", fmt.Errorf("%w: unknown bearer token", ErrUnauthenticated)
	}
	return principal, nil
}
