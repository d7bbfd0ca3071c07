package auth

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxPrefixLength is the longest prefix a grant may list: the longest lease
// name.
const MaxPrefixLength = 128

// Policy says which principals may use which verbs on which lease names. It
// is built once by ParsePolicy (or AllowAll), is immutable and safe for
// concurrent use. A nil *Policy grants nothing.
type Policy struct {
	allowAll bool
	anyone   *grantSet            // grants to "*"
	domains  map[string]*grantSet // grants to "*@domain", by lower-case domain
	exact    map[string]*grantSet // grants to one principal, by canonical form
}

// AllowAll returns a policy that grants every verb on every name to everyone,
// including the empty principal. It is the policy when authentication is off
// (LEASESVC_AUTH=none).
func AllowAll() *Policy { return &Policy{allowAll: true} }

// LoadPolicy reads the policy file at path and parses it with ParsePolicy.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read policy file: %w", err)
	}
	return ParsePolicy(data, path)
}

// ParsePolicy parses a policy file (YAML, or JSON, which is YAML; see the
// package documentation). filename is used only in error messages. Every
// problem is reported at once, as the errors.Join of *FileError values
// formatted "FILE:LINE:COL: PATH: MESSAGE", for example
//
//	policy.yaml:7:9: grants[1].verbs[0]: unknown verb "write" (want "read", "acquire", "delete" or "admin")
func ParsePolicy(data []byte, filename string) (*Policy, error) {
	c := newChecker(filename, data)
	root := c.document(data)
	if root == nil {
		return nil, c.err()
	}
	b := newPolicyBuilder()
	top := c.fields(root, "", []string{"grants"}, []string{"grants"})
	for i, item := range c.list(top["grants"], "grants", "one grant") {
		if g, ok := c.grant(item, fmt.Sprintf("grants[%d]", i)); ok {
			b.add(g)
		}
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return b.build(), nil
}

// grant is one parsed entry of a policy's grants list.
type grant struct {
	principals []string // "*", "*@domain" or a principal
	verbs      uint8    // the verbs granted, with those they imply (Verb.implied)
	prefixes   []string // "*" or name prefixes
}

var grantKeys = []string{"principals", "verbs", "prefixes", "description"}

// grant reads one grant; ok is false if it has a problem.
func (c *checker) grant(n *yaml.Node, path string) (g grant, ok bool) {
	before := len(c.errs)
	f := c.fields(n, path, grantKeys, grantKeys[:3])
	if f == nil {
		return g, false
	}
	if d := f["description"]; d != nil {
		c.str(d, path+".description")
	}
	c.eachString(f["principals"], path+".principals", "one principal", func(s string, n *yaml.Node, p string) {
		if msg := principalProblem(s); msg != "" {
			c.errorf(n, p, "%s", msg)
			return
		}
		g.principals = append(g.principals, s)
	})
	c.eachString(f["verbs"], path+".verbs", "one verb", func(s string, n *yaml.Node, p string) {
		v := Verb(s)
		if !v.Valid() {
			c.errorf(n, p, "unknown verb %q (want %s)", s, orList([]string{string(Read), string(Acquire), string(Delete), string(Admin)}, "or"))
			return
		}
		g.verbs |= v.implied()
	})
	c.eachString(f["prefixes"], path+".prefixes", "one prefix", func(s string, n *yaml.Node, p string) {
		if msg := prefixProblem(s); msg != "" {
			c.errorf(n, p, "%s", msg)
			return
		}
		g.prefixes = append(g.prefixes, s)
	})
	return g, len(c.errs) == before
}

// eachString calls fn for each string of the non-empty list n (if n is
// present), reporting items that are not strings and duplicates.
func (c *checker) eachString(n *yaml.Node, path, one string, fn func(s string, n *yaml.Node, path string)) {
	seen := make(map[string]*yaml.Node)
	for i, item := range c.list(n, path, one) {
		p := fmt.Sprintf("%s[%d]", path, i)
		s, ok := c.str(item, p)
		if !ok {
			continue
		}
		if first, dup := seen[s]; dup {
			c.errorf(item, p, "duplicate %q (first at %d:%d)", s, first.Line, first.Column)
			continue
		}
		seen[s] = item
		fn(s, item, p)
	}
}

// principalProblem says what is wrong with a grant's principal pattern, or
// returns "".
func principalProblem(s string) string {
	if s == "" {
		return "empty principal"
	}
	if bad := badText(s); bad != "" {
		return fmt.Sprintf("principal %q %s", s, bad)
	}
	if s == "*" {
		return ""
	}
	if domain, ok := strings.CutPrefix(s, "*@"); ok {
		switch {
		case domain == "":
			return fmt.Sprintf("principal %q: \"*@\" needs a domain, as in \"*@example.com\"", s)
		case strings.HasPrefix(domain, "*.") || strings.HasPrefix(domain, "."):
			d := strings.TrimLeft(domain, "*.")
			return fmt.Sprintf("principal %q: a domain grant covers one domain exactly, there are no subdomain wildcards: list \"*@%s\" and each subdomain, as \"*@sub.%s\"", s, d, d)
		case strings.ContainsAny(domain, "@*"):
			return fmt.Sprintf("principal %q: the domain of \"*@domain\" must not contain \"@\" or \"*\"", s)
		}
		if msg := domainProblem(domain); msg != "" {
			return fmt.Sprintf("principal %q %s", s, msg)
		}
		return ""
	}
	if rest, ok := strings.CutPrefix(s, "*"); ok && !strings.ContainsAny(rest, "*@") && strings.Contains(rest, ".") {
		// "*example.com", "*.example.com": a domain grant misspelt.
		return fmt.Sprintf("principal %q: \"*\" is only allowed as \"*\" (anyone) or \"*@domain\"; for everyone at %s write \"*@%s\"", s, strings.TrimLeft(rest, "."), strings.TrimLeft(rest, "."))
	}
	if strings.Contains(s, "*") {
		return fmt.Sprintf("principal %q: \"*\" is only allowed as \"*\" (anyone) or \"*@domain\"", s)
	}
	return addressProblem(s, true)
}

// addressProblem says why the principal s (not a pattern), if it has an
// "@", cannot be an address anyone authenticates as, or returns "". A
// principal with an "@" is local@domain: one "@", something before it,
// and a domain of non-empty dot-separated labels. Google principals are
// verified emails, which have that form; a static one without "@" (such as
// "ci-runner") is any text. The likely intent is named: "@example.com" is
// most often "*@example.com" in a policy (inPolicy).
func addressProblem(s string, inPolicy bool) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return ""
	}
	local, domain := s[:at], s[at+1:]
	switch {
	case local == "" && (domain == "" || domainProblem(domain) != ""):
		return fmt.Sprintf("principal %q is not an address (want name@domain)", s)
	case strings.Count(s, "@") > 1:
		return fmt.Sprintf("principal %q has more than one \"@\" (want name@domain)", s)
	case local == "" && inPolicy:
		return fmt.Sprintf("principal %q has nothing before \"@\", so it matches no one: for everyone at %s write \"*@%s\", or give the whole address, as in \"name@%s\"", s, domain, domain, domain)
	case local == "":
		return fmt.Sprintf("principal %q has nothing before \"@\": give the whole address, as in \"name@%s\"", s, domain)
	case domain == "":
		return fmt.Sprintf("principal %q has no domain after \"@\": give the whole address, as in \"%sexample.com\"", s, s)
	}
	if msg := domainProblem(domain); msg != "" {
		return fmt.Sprintf("principal %q %s", s, msg)
	}
	return ""
}

// domainProblem says what is wrong with the domain of an address or a
// "*@domain" pattern, or returns "": an empty label (a leading, trailing or
// doubled "."), which no verified email has.
func domainProblem(domain string) string {
	if !strings.HasPrefix(domain, ".") && !strings.HasSuffix(domain, ".") && !strings.Contains(domain, "..") {
		return ""
	}
	msg := fmt.Sprintf("has the domain %q with an empty label (a leading, trailing or doubled \".\"), so it matches no one", domain)
	if clean := strings.Join(strings.FieldsFunc(domain, func(r rune) bool { return r == '.' }), "."); clean != "" {
		msg += fmt.Sprintf(": write the domain as %q", clean)
	}
	return msg
}

// prefixProblem says what is wrong with a grant's prefix, or returns "".
func prefixProblem(s string) string {
	if s == "*" {
		return ""
	}
	if s == "" {
		return `empty prefix (use "*" for every name)`
	}
	if len(s) > MaxPrefixLength {
		return fmt.Sprintf("prefix is %d characters long, want at most %d", len(s), MaxPrefixLength)
	}
	for i := range len(s) {
		ch := s[i]
		alnum := 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9'
		if i == 0 && !alnum {
			return fmt.Sprintf("prefix %q must start with a letter or digit (or be \"*\" for every name)", s)
		}
		if !alnum && ch != '.' && ch != '_' && ch != '-' {
			return fmt.Sprintf("prefix %q: want only letters, digits, '.', '_' and '-'", s)
		}
	}
	return ""
}

// policyBuilder collects grants into a Policy's indexes.
type policyBuilder struct {
	p *Policy
}

func newPolicyBuilder() *policyBuilder {
	return &policyBuilder{p: &Policy{domains: map[string]*grantSet{}, exact: map[string]*grantSet{}}}
}

func (b *policyBuilder) add(g grant) {
	for _, pr := range g.principals {
		var s *grantSet
		switch {
		case pr == "*":
			if b.p.anyone == nil {
				b.p.anyone = new(grantSet)
			}
			s = b.p.anyone
		case strings.HasPrefix(pr, "*@"):
			s = getOrNew(b.p.domains, strings.ToLower(pr[2:]))
		default:
			s = getOrNew(b.p.exact, canonicalPrincipal(pr))
		}
		s.add(g.verbs, g.prefixes)
	}
}

// getOrNew returns m[k], adding an empty set first if there is none.
func getOrNew(m map[string]*grantSet, k string) *grantSet {
	s := m[k]
	if s == nil {
		s = new(grantSet)
		m[k] = s
	}
	return s
}

// build finishes the indexes and returns the policy.
func (b *policyBuilder) build() *Policy {
	sets := []*grantSet{b.p.anyone}
	for _, s := range b.p.domains {
		sets = append(sets, s)
	}
	for _, s := range b.p.exact {
		sets = append(sets, s)
	}
	for _, s := range sets {
		if s != nil {
			for i := range s.verbs {
				s.verbs[i].normalize()
			}
		}
	}
	return b.p
}

// canonicalPrincipal lower-cases the domain part (after the last "@") of a
// principal; the local part keeps its case.
func canonicalPrincipal(p string) string {
	at := strings.LastIndexByte(p, '@')
	if at < 0 {
		return p
	}
	return p[:at+1] + strings.ToLower(p[at+1:])
}

// grantSet is what one principal pattern is granted: for each verb, the
// names covered.
type grantSet struct {
	verbs [numVerbs]prefixSet // by Verb.index()-1
}

// add grants the verbs (a set of Verb.implied bits) on prefixes; build
// normalizes the sets.
func (s *grantSet) add(verbs uint8, prefixes []string) {
	for i := range numVerbs {
		if verbs&(1<<i) == 0 {
			continue
		}
		ps := &s.verbs[i]
		for _, p := range prefixes {
			if p == "*" {
				ps.all = true
			} else {
				ps.prefixes = append(ps.prefixes, p)
			}
		}
	}
}

// prefixSet is a set of names given by prefixes.
type prefixSet struct {
	all      bool     // every name
	prefixes []string // sorted, and none is a prefix of another
}

// normalize sorts ps.prefixes and drops those that another one covers.
func (ps *prefixSet) normalize() {
	if ps.all {
		ps.prefixes = nil
		return
	}
	slices.Sort(ps.prefixes)
	kept := ps.prefixes[:0]
	for _, p := range ps.prefixes {
		// Sorted, a prefix comes right before what it covers (everything
		// between them starts with it, and is dropped too).
		if len(kept) > 0 && strings.HasPrefix(p, kept[len(kept)-1]) {
			continue
		}
		kept = append(kept, p)
	}
	ps.prefixes = slices.Clip(kept)
}

// covers reports whether the set contains name, that is whether a prefix of
// the set is a prefix of name.
func (ps *prefixSet) covers(name string) bool {
	if ps.all {
		return true
	}
	// The only candidate is the greatest prefix ≤ name: if p ≤ q ≤ name
	// and p is a prefix of name, then q starts with p, so q is not in the
	// set unless q == p.
	i, found := slices.BinarySearch(ps.prefixes, name)
	return found || i > 0 && strings.HasPrefix(name, ps.prefixes[i-1])
}

// overlaps reports whether some name starting with prefix may be in the set:
// a prefix of the set starts with prefix, or covers it.
func (ps *prefixSet) overlaps(prefix string) bool {
	if ps.covers(prefix) {
		return true
	}
	i, _ := slices.BinarySearch(ps.prefixes, prefix)
	return i < len(ps.prefixes) && strings.HasPrefix(ps.prefixes[i], prefix)
}
