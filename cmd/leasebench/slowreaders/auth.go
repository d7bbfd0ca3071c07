package main

import "github.com/leasesvc/leasesvc/cmd/leasebench/internal/benchinst"

// auth is the command's static tokens: principal i is "p<i>@bench", with
// the token "slowreaders-token-<i>-…" (i = principals is the legitimate
// reader's).
var auth = &benchinst.Auth{Tool: "slowreaders"}

// tokenOf is the static bearer token of principal i.
func tokenOf(i int) string { return auth.Token(i) }
