package auth

import (
	"fmt"
	"slices"
	"testing"
)

func mustPolicy(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(src), "policy.yaml")
	if err != nil {
		t.Fatalf("ParsePolicy: %v", err)
	}
	return p
}

func TestAllowed(t *testing.T) {
	p := mustPolicy(t, validPolicy)
	tests := []struct {
		principal string
		verb      Verb
		name      string
		want      bool
	}{
		// Exact principal, verb implication: acquire implies read, not admin.
		{"alice@example.com", Acquire, "team-a.scheduler", true},
		{"alice@example.com", Read, "team-a.scheduler", true},
		{"alice@example.com", Admin, "team-a.scheduler", false},
		// Prefix boundary.
		{"alice@example.com", Acquire, "team-a.", true},
		{"alice@example.com", Acquire, "team-ab", false},
		{"alice@example.com", Acquire, "team-a", false},
		{"alice@example.com", Acquire, "team-b.x", false},
		// "*" principal grants read on public. to everyone authenticated.
		{"alice@example.com", Read, "public.x", true},
		{"alice@example.com", Acquire, "public.x", false},
		{"stranger@elsewhere.org", Read, "public.x", true},
		{"stranger@elsewhere.org", Read, "team-a.x", false},
		{"no-at-sign", Read, "public.x", true},
		{"", Read, "public.x", false}, // nobody authenticated
		// Domain grants, domain compared case-insensitively.
		{"bob@team-a.example.com", Acquire, "team-a.x", true},
		{"bob@TEAM-A.Example.COM", Acquire, "team-a.x", true},
		{"bob@team-a.example.com", Admin, "team-a.x", false},
		{"bob@sub.team-a.example.com", Acquire, "team-a.x", false},
		{"bob@example.com", Acquire, "team-a.x", false},
		{"team-a.example.com", Acquire, "team-a.x", false},
		// Exact principals: domain case-insensitive, local part exact.
		{"alice@EXAMPLE.com", Acquire, "team-a.x", true},
		{"Alice@example.com", Acquire, "team-a.x", false},
		{"alice@example.com.", Acquire, "team-a.x", false},
		// Admin implies acquire and read; "*" prefix covers every name.
		{"ops@example.com", Admin, "anything", true},
		{"ops@example.com", Acquire, "team-a.x", true},
		{"ops@example.com", Read, "x", true},
		// Several prefixes, and read+acquire listed together.
		{"ci-runner", Acquire, "ci.deploy", true},
		{"ci-runner", Acquire, "team-a.builds.7", true},
		{"ci-runner", Acquire, "team-a.other", false},
		{"ci-runner", Read, "team-a.builds", false},
		{"CI-runner", Read, "ci.deploy", false}, // no domain: exact, case included
		// Invalid verbs are never granted.
		{"ops@example.com", Verb("write"), "x", false},
		{"ops@example.com", Verb(""), "x", false},
	}
	for _, tt := range tests {
		if got := p.Allowed(tt.principal, tt.verb, tt.name); got != tt.want {
			t.Errorf("Allowed(%q, %s, %q) = %v, want %v", tt.principal, tt.verb, tt.name, got, tt.want)
		}
	}
}

func TestAllowedPrefixSets(t *testing.T) {
	// Overlapping and nested prefixes over several grants of one principal
	// exercise the normalized, binary-searched prefix sets.
	p := mustPolicy(t, `grants:
  - principals: [u]
    verbs: [read]
    prefixes: [b.c, a, b.cd.e, c.x, c.]
  - principals: [u]
    verbs: [acquire]
    prefixes: [b.cd, m]
  - principals: [u]
    verbs: [admin]
    prefixes: [zz]
`)
	tests := []struct {
		verb Verb
		name string
		want bool
	}{
		{Read, "a", true}, {Read, "abc", true}, {Read, "A", false}, {Read, "0", false},
		{Read, "b", false}, {Read, "b.", false}, {Read, "b.c", true}, {Read, "b.c0", true},
		{Read, "b.cd", true}, {Read, "b.cd.e.f", true}, {Read, "b.b", false},
		// A covered prefix sorts between its cover and the name.
		{Read, "b.ce", true}, {Read, "b.cz", true}, {Read, "c.y", true},
		{Read, "c.", true}, {Read, "c.x", true}, {Read, "c", false}, {Read, "cx", false},
		{Read, "m.1", true}, {Read, "zz", true}, {Read, "z", false},
		{Acquire, "b.cd.e", true}, {Acquire, "b.c", false}, {Acquire, "b.ce", false},
		{Acquire, "a", false}, {Acquire, "m", true}, {Acquire, "zzz", true},
		{Admin, "zz", true}, {Admin, "m", false}, {Admin, "z", false},
	}
	for _, tt := range tests {
		if got := p.Allowed("u", tt.verb, tt.name); got != tt.want {
			t.Errorf("Allowed(u, %s, %q) = %v, want %v", tt.verb, tt.name, got, tt.want)
		}
	}
}

func TestListScope(t *testing.T) {
	p := mustPolicy(t, validPolicy)
	tests := []struct {
		principal string
		verb      Verb
		prefix    string
		all, some bool
	}{
		// Only a team-a. grant (plus read on public. for everyone).
		{"alice@example.com", Acquire, "", false, true},
		{"alice@example.com", Acquire, "team-a.x", true, true},
		{"alice@example.com", Acquire, "team-a.", true, true},
		{"alice@example.com", Acquire, "team", false, true},
		{"alice@example.com", Acquire, "team-b.", false, false},
		{"alice@example.com", Acquire, "public.", false, false},
		{"alice@example.com", Read, "public.", true, true},
		{"alice@example.com", Read, "p", false, true},
		{"alice@example.com", Read, "x", false, false},
		{"alice@example.com", Admin, "", false, false},
		{"stranger@elsewhere.org", Read, "", false, true},
		{"stranger@elsewhere.org", Read, "team-a.", false, false},
		{"bob@Team-A.example.com", Acquire, "team-a.q", true, true},
		{"ops@example.com", Admin, "", true, true},
		{"ops@example.com", Read, "anything", true, true},
		{"ci-runner", Acquire, "team-a.", false, true},
		{"ci-runner", Acquire, "team-a.builds.1", true, true},
		{"", Read, "", false, false},
		{"ops@example.com", Verb("list"), "", false, false},
	}
	for _, tt := range tests {
		all, some := p.ListScope(tt.principal, tt.verb, tt.prefix)
		if all != tt.all || some != tt.some {
			t.Errorf("ListScope(%q, %s, %q) = %v, %v, want %v, %v", tt.principal, tt.verb, tt.prefix, all, some, tt.all, tt.some)
		}
	}
}

func TestAllowAllAndNil(t *testing.T) {
	all := AllowAll()
	for _, principal := range []string{"", "anyone"} {
		if !all.Allowed(principal, Admin, "x") || !all.Allowed(principal, Read, "") {
			t.Errorf("AllowAll().Allowed(%q, ...) = false", principal)
		}
		if a, s := all.ListScope(principal, Read, ""); !a || !s {
			t.Errorf("AllowAll().ListScope(%q) = %v, %v", principal, a, s)
		}
	}
	var none *Policy
	if none.Allowed("a", Read, "x") {
		t.Error("nil policy allowed something")
	}
	if a, s := none.ListScope("a", Read, ""); a || s {
		t.Error("nil policy ListScope granted something")
	}
}

func TestVerbImplies(t *testing.T) {
	verbs := []Verb{Read, Acquire, Delete, Admin}
	implies := map[Verb][]Verb{Read: {Read}, Acquire: {Read, Acquire}, Delete: {Read, Delete}, Admin: verbs}
	for _, v := range verbs {
		for _, w := range verbs {
			if got, want := v.Implies(w), slices.Contains(implies[v], w); got != want {
				t.Errorf("%s.Implies(%s) = %v, want %v", v, w, got, want)
			}
		}
		if v.Implies("write") || Verb("write").Implies(v) || !v.Valid() {
			t.Errorf("%s: invalid verbs must imply and be implied by nothing", v)
		}
	}
	if Verb("READ").Valid() {
		t.Error(`Verb("READ").Valid() = true`)
	}
}

// benchPolicy builds a policy of n teams, each with a domain grant, a few
// exact grants and a shared read grant.
func benchPolicy(b *testing.B, n int) *Policy {
	src := "grants:\n  - principals: [\"*\"]\n    verbs: [read]\n    prefixes: [public.]\n"
	for i := range n {
		src += fmt.Sprintf("  - principals: [\"*@team%d.example.com\", lead%d@example.com, bot%d]\n    verbs: [acquire]\n    prefixes: [team%d., shared%d.]\n", i, i, i, i, i)
	}
	return mustPolicy(b, src)
}

func TestAllowedDoesNotAllocate(t *testing.T) {
	p := mustPolicy(t, validPolicy)
	allocs := testing.AllocsPerRun(100, func() {
		p.Allowed("bob@team-a.example.com", Acquire, "team-a.scheduler")
		p.Allowed("alice@example.com", Read, "public.x")
		p.ListScope("alice@example.com", Read, "team-a.")
	})
	if allocs != 0 {
		t.Errorf("Allowed and ListScope allocate %v times per run, want 0", allocs)
	}
}

func BenchmarkAllowed(b *testing.B) {
	p := benchPolicy(b, 300)
	cases := []struct {
		name, principal, lease string
	}{
		{"domain", "dev@team150.example.com", "team150.scheduler"},
		{"exact", "lead7@example.com", "shared7.cron"},
		{"denied", "dev@team150.example.com", "team151.scheduler"},
		{"upper-case domain", "dev@Team150.example.com", "team150.scheduler"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Allowed(c.principal, Acquire, c.lease)
			}
		})
	}
}

// TestDeleteVerb: a grant of delete allows delete and read but not
// acquire, and admin allows delete (docs/security.md).
func TestDeleteVerb(t *testing.T) {
	p := mustPolicy(t, `grants:
  - principals: [janitor@example.com]
    verbs: [delete]
    prefixes: [team-a.]
  - principals: [oncall@example.com]
    verbs: [admin]
    prefixes: ['*']
  - principals: [svc@example.com]
    verbs: [acquire]
    prefixes: ['*']
`)
	for _, c := range []struct {
		principal string
		verb      Verb
		name      string
		want      bool
	}{
		{"janitor@example.com", Delete, "team-a.x", true},
		{"janitor@example.com", Read, "team-a.x", true},
		{"janitor@example.com", Acquire, "team-a.x", false},
		{"janitor@example.com", Delete, "team-b.x", false},
		{"oncall@example.com", Delete, "team-b.x", true},
		{"svc@example.com", Delete, "team-a.x", false},
	} {
		if got := p.Allowed(c.principal, c.verb, c.name); got != c.want {
			t.Errorf("Allowed(%s, %s, %s) = %v, want %v", c.principal, c.verb, c.name, got, c.want)
		}
	}
}
