package main

import (
	"io"
	"strings"
	"testing"
)

// TestMCPUsage: bad flags of `leasectl mcp` are usage errors (status 2)
// that name what is wrong, before anything is served.
func TestMCPUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--ttl", "0s"}, "--ttl"},
		{[]string{"mcp", "--ttl", "1500us"}, "--ttl"},
		{[]string{"mcp", "--log-level", "loud"}, "--log-level"},
		{[]string{"mcp", "--holder", "tab\there"}, "Holder"},
		{[]string{"mcp", "extra"}, "takes no argument"},
		{[]string{"mcp", "--url", "ftp://x"}, "http"},
	} {
		err := run(t.Context(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
		if code := exitCode(err); err == nil || code != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (exit %d), want a usage error (exit %d) naming %s", tc.args, err, code, exitUsage, tc.want)
		}
	}
}
