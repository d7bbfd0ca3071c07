package auth_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/leasesvc/leasesvc/auth"
)

func ExampleParsePolicy() {
	policy, err := auth.ParsePolicy([]byte(`
grants:
  - principals: ["*@team-a.example.com"]
    verbs: [acquire]
    prefixes: [team-a.]
  - principals: ["*"]
    verbs: [read]
    prefixes: ["*"]
`), "policy.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(policy.Allowed("bob@team-a.example.com", auth.Acquire, "team-a.scheduler"))
	fmt.Println(policy.Allowed("bob@team-a.example.com", auth.Acquire, "team-ab.scheduler"))
	fmt.Println(policy.Allowed("eve@example.org", auth.Read, "team-a.scheduler"))
	fmt.Println(policy.Allowed("eve@example.org", auth.Acquire, "team-a.scheduler"))
	// Output:
	// true
	// false
	// true
	// false
}

func ExampleParsePolicy_errors() {
	_, err := auth.ParsePolicy([]byte(`grants:
  - principals: [alice@example.com]
    verbs: [read]
    prefixes: ["*"]
  - principals: ["*@"]
    verbs:
      - write
    prefixes: [team-a.]
    prefix: [team-b.]
`), "policy.yaml")
	fmt.Println(err)
	// Output:
	// policy.yaml:5:18: grants[1].principals[0]: principal "*@": "*@" needs a domain, as in "*@example.com"
	// policy.yaml:7:9: grants[1].verbs[0]: unknown verb "write" (want "read", "acquire", "delete" or "admin")
	// policy.yaml:9:5: grants[1]: unknown key "prefix" (want "principals", "verbs", "prefixes" or "description")
}

func ExamplePolicy_ListScope() {
	policy, err := auth.ParsePolicy([]byte(`{"grants": [{"principals": ["alice@example.com"], "verbs": ["read"], "prefixes": ["team-a."]}]}`), "policy.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, prefix := range []string{"team-a.jobs.", "", "team-b."} {
		all, some := policy.ListScope("alice@example.com", auth.Read, prefix)
		fmt.Printf("%q: all=%v some=%v\n", prefix, all, some)
	}
	// Output:
	// "team-a.jobs.": all=true some=true
	// "": all=false some=true
	// "team-b.": all=false some=false
}

func ExampleParseStatic() {
	authn, err := auth.ParseStatic([]byte(`
tokens:
  - principal: alice@example.com
    token: "alice-token-0123456789"
`), "tokens.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	r := httptest.NewRequest("GET", "/v1/leases/team-a.x", nil)
	r.Header.Set("Authorization", "Bearer alice-token-0123456789")
	fmt.Println(authn.Authenticate(r))
	r.Header.Set("Authorization", "Bearer guessed-token-0000000")
	fmt.Println(authn.Authenticate(r))
	// Output:
	// alice@example.com <nil>
	//  auth: unauthenticated: unknown bearer token
}

func ExampleLimiter() {
	limiter := auth.NewLimiter(1, 2) // 1 request a second, bursts of 2
	for range 3 {
		fmt.Println(limiter.Allow("alice@example.com"))
	}
	// Output:
	// true 0s
	// true 0s
	// false 1s
}
