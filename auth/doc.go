// Package auth decides who a request comes from (authentication), what it may
// do (authorization) and how often (rate limiting), for leasesvc's HTTP API.
//
// # Principals
//
// A principal is the identity an Authenticator returns for a request: a
// non-empty string without whitespace or control characters, usually an
// email address. Two authenticators exist:
//
//   - Static tokens (ParseStatic, LoadStatic): each bearer token of a tokens
//     file names a principal. A principal may have several tokens (for
//     rotation); a token belongs to exactly one principal.
//   - Google ID tokens (NewGoogle): an OpenID Connect ID token signed by
//     Google, as sent by Cloud Run service-to-service calls or made by
//     `gcloud auth print-identity-token --audiences=...`. The signature, the
//     expiry and the audience are checked with google.golang.org/api/idtoken;
//     the principal is the "email" claim, which must be present and
//     verified ("email_verified" true). Tokens without a verified email,
//     such as IAP's, are refused.
//
// Both read only an "Authorization: Bearer <token>" header: the scheme is
// case-insensitive, there must be one such header, one space, and one
// non-empty token, and no control character anywhere (a tab, or a line break
// that obsolete line folding left, wraps ErrMalformedHeader). Every failure
// wraps ErrUnauthenticated (HTTP 401), except that Google's certificates
// being unreachable wraps ErrUnavailable (HTTP 503). Error texts never
// contain the token.
//
// A Google ID token's form is checked before idtoken sees it (three
// unpadded base64url parts, a JSON header with alg RS256 or ES256 and a kid,
// a non-empty RS256 signature or a 64-byte ES256 one), since idtoken
// v0.309.0 indexes an ES256 signature as 64 bytes and panicked on a shorter
// one. A panic of the validator all the same is recovered: the token is
// refused (ErrUnauthenticated), the request is not dropped.
//
// A static token is compared by its SHA-256 digest: the file's tokens are kept
// only as digests, and a request's token is hashed and looked up, so the time
// taken does not reveal how much of a known token a guess shares. Tokens must
// be at least 16 characters; use long random ones (for example
// `openssl rand -base64 32`), since they are not salted or stretched.
//
// # Verbs
//
// Every API call needs one verb on the lease name it touches:
//
//	read     get, list, watch
//	acquire  acquire, renew, release, transfer  (implies read)
//	delete   delete a lease nobody holds  (implies read)
//	admin    operator actions such as revoke  (implies every verb)
//
// A grant of a verb also grants the verbs it implies. acquire and delete
// do not imply each other: a clean-up job may delete what it may not lead.
//
// # Policies
//
// A policy is a list of grants. Each grant gives some principals some verbs
// on the lease names that start with some prefixes. Grants only add: there
// are no deny rules, and a request is allowed if any grant covers it. A
// principal pattern is one of
//
//	alice@example.com   exactly that principal
//	*@example.com       every principal whose domain, the part after its
//	                    last "@", is example.com (sub.example.com is another
//	                    domain)
//	*                   every authenticated principal
//
// Domains compare case-insensitively (Alice@EXAMPLE.com is the principal
// Alice@example.com); the rest of a principal compares exactly, case
// included. "*" may appear nowhere else in a pattern. A principal with an
// "@" must be name@domain, with something before its only "@" and a domain
// without empty labels: patterns that can match no one, such as
// "@example.com" (meant as "*@example.com"), "alice@", "a@@example.com",
// "alice@example..com", "*.example.com" or "*@.example.com" (there are no
// subdomain wildcards), are errors that name the form meant.
//
// A prefix is "*", every name, or 1 to 128 characters of [A-Za-z0-9._-]
// starting with a letter or digit, like lease names. It covers the names that
// start with it, as strings: "team-a." covers "team-a.scheduler" and
// "team-a." itself but not "team-ab"; "team-a" would cover "team-ab" too, so
// end namespace prefixes with the "." of the naming convention.
//
// Listing names with a prefix needs the verb on the names listed: when a
// grant's prefix is a prefix of the listed one, every result is covered;
// when grants cover only some names under it (listing "" with a grant on
// "team-a."), the results are filtered one by one; when no grant can cover
// any of them, the request is refused (see Policy.ListScope).
//
// With authentication off (LEASESVC_AUTH=none) the policy is AllowAll, which
// grants everything to everyone.
//
// # Files
//
// Both files are YAML; JSON is YAML, so both may also be written as JSON.
// They must be UTF-8, hold exactly one document, and use no anchors,
// aliases or custom tags; line breaks are "\n" or "\r\n". Keys are checked
// strictly: unknown or duplicate keys, missing keys, empty lists and values of
// the wrong type are errors. A value that should be text may be written
// unquoted even if YAML reads it as a number or date (prefix 2024 is the text
// "2024", exactly as written), but null, true and false must be quoted. A
// description (any text) may be given for a grant or a token, since JSON has
// no comments.
//
// A tokens file:
//
//	tokens:
//	  - principal: alice@example.com
//	    token: "alice-token-0123456789"
//	  - principal: ci-runner
//	    token: "ci-token-abcdefghijklmnop"
//	    description: CI deploys, rotated monthly
//
// Token rules: at least 16 characters, no whitespace or control characters,
// each token only once in the file. Principal rules: not empty, no whitespace
// or control characters, no "*", and name@domain if it has an "@" (as in a
// policy, which could not name it otherwise).
//
// A policy file:
//
//	grants:
//	  - principals: [alice@example.com, "*@team-a.example.com"]
//	    verbs: [acquire]                 # and read
//	    prefixes: [team-a.]
//	  - principals: ["*"]                # everyone authenticated
//	    verbs: [read]
//	    prefixes: ["*"]                  # every name
//	  - principals: [ops@example.com]
//	    verbs: [admin]
//	    prefixes: ["*"]
//
// The same in JSON:
//
//	{"grants": [
//	  {"principals": ["alice@example.com", "*@team-a.example.com"], "verbs": ["acquire"], "prefixes": ["team-a."]},
//	  {"principals": ["*"], "verbs": ["read"], "prefixes": ["*"]},
//	  {"principals": ["ops@example.com"], "verbs": ["admin"], "prefixes": ["*"]}
//	]}
//
// Each grant needs principals, verbs and prefixes, each a non-empty list
// without duplicates; the grants list must not be empty.
//
// # Errors in files
//
// A file is checked completely at start-up and all its problems are reported
// at once, one per line, each a *FileError:
//
//	FILE:LINE:COL: PATH: MESSAGE
//
// for example
//
//	policy.yaml:7:9: grants[1].verbs[0]: unknown verb "write" (want "read", "acquire", "delete" or "admin")
//	policy.yaml:9:5: grants[1]: unknown key "prefix" (want "principals", "verbs", "prefixes" or "description")
//
// Lines and columns start at 1; columns count characters. PATH is left out
// (with its colon) when the problem is the whole document: a syntax error,
// an empty document, more than one document. YAML syntax errors carry the
// line yaml.v3 gives and column 1; for some errors that line is where the
// enclosing block or flow collection starts, so the mistake may be further
// down. JSON syntax errors (in a file starting with "{" or "[") carry the
// exact line and column from encoding/json.
//
// # Rate limiting
//
// Limiter keeps a token bucket per key (a principal, or an address when
// nobody is authenticated): up to burst requests at once, refilled at a
// steady rate. A refused request gets the time until the next token, in whole
// seconds, for a Retry-After header (HTTP 429 resource_exhausted). Buckets
// live in the process: with several instances each limits on its own, so the
// service-wide rate is up to the number of instances times the configured
// one.
//
// # Limits
//
//   - Static tokens and policies are read once; changing them needs a
//     restart (or the caller building a new Authenticator and Policy).
//   - Google tokens are checked offline against Google's cached public
//     certificates: a token stays valid until its expiry (about an hour)
//     even if the account is disabled. The certificates are fetched on first
//     use and when their cache lifetime runs out; until they can be fetched,
//     requests fail with ErrUnavailable.
//   - GoogleConfig.Audiences must be listed: the accepted audience is never
//     taken from the request (Host header, absolute URL in the request
//     line), which the caller controls (docs/contract.md §9).
//   - The issuer claim is not checked separately: idtoken accepts only
//     tokens signed by Google's keys, and the verified-email rule excludes
//     Google's other token kinds.
package auth
