package auth

import (
	"strings"
)

// Allowed reports whether the policy grants principal the verb v on the lease
// name. The empty principal (nobody authenticated) is granted nothing, except
// by AllowAll; an invalid verb is never granted. Allowed does not check that
// name is a valid lease name. It does not allocate unless the principal's
// domain has upper-case letters.
func (p *Policy) Allowed(principal string, v Verb, name string) bool {
	if p == nil {
		return false
	}
	if p.allowAll {
		return true
	}
	l := v.index()
	if l == 0 || principal == "" {
		return false
	}
	exact, domain := p.sets(principal)
	return covers(exact, l, name) || covers(domain, l, name) || covers(p.anyone, l, name)
}

// ListScope says whether principal may list the names starting with prefix
// with verb v: all means every such name is covered by a grant, so the caller
// lists without filtering; some means at least one such name could be
// covered, so the caller lists and filters each result with Allowed; neither
// means the answer is 403 permission_denied. all implies some. all is exact
// for a single grant but does not add up grants: prefixes "a" to "z" granted
// separately do not make all true for prefix "", only some.
func (p *Policy) ListScope(principal string, v Verb, prefix string) (all, some bool) {
	if p == nil {
		return false, false
	}
	if p.allowAll {
		return true, true
	}
	l := v.index()
	if l == 0 || principal == "" {
		return false, false
	}
	exact, domain := p.sets(principal)
	for _, s := range [...]*grantSet{exact, domain, p.anyone} {
		if s == nil {
			continue
		}
		ps := &s.verbs[l-1]
		if ps.covers(prefix) {
			return true, true
		}
		some = some || ps.overlaps(prefix)
	}
	return false, some
}

// covers reports whether s grants the verb of index l on name.
func covers(s *grantSet, l int, name string) bool {
	return s != nil && s.verbs[l-1].covers(name)
}

// sets returns the grants to principal itself and to its domain ("*@domain"),
// either nil if there are none.
func (p *Policy) sets(principal string) (exact, domain *grantSet) {
	at := strings.LastIndexByte(principal, '@')
	if at < 0 {
		return p.exact[principal], nil
	}
	d := principal[at+1:]
	if !isLowerASCII(d) {
		// Rare: canonicalize, which allocates.
		d = strings.ToLower(d)
		return p.exact[principal[:at+1]+d], p.domains[d]
	}
	return p.exact[principal], p.domains[d]
}

// isLowerASCII reports whether s is ASCII without upper-case letters, so
// that strings.ToLower(s) == s.
func isLowerASCII(s string) bool {
	for i := range len(s) {
		if c := s[i]; c >= 0x80 || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}
