package main

import (
	"io"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/internal/leasemcp"
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
		{[]string{"mcp", "--max-line", "1KiB"}, "--max-line"},
		{[]string{"mcp", "--max-line", "2GiB"}, "--max-line"},
		{[]string{"mcp", "--max-line", "4 MB"}, "--max-line"},
		{[]string{"mcp", "--max-line", "-1"}, "--max-line"},
	} {
		err := run(t.Context(), tc.args, func(string) string { return "" }, io.Discard, io.Discard)
		if code := exitCode(err); err == nil || code != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (exit %d), want a usage error (exit %d) naming %s", tc.args, err, code, exitUsage, tc.want)
		}
	}
}

// TestMCPMaxLine: --max-line, else $LEASESVC_MCP_MAX_LINE, else 4 MiB; a
// size in bytes, KiB, MiB or GiB from 64 KiB to 1 GiB.
func TestMCPMaxLine(t *testing.T) {
	for _, tc := range []struct {
		flag, env string
		want      int
	}{
		{"", "", leasemcp.DefaultMaxLine},
		{"", "8MiB", 8 << 20},
		{"1048576", "8MiB", 1 << 20},
		{"64KiB", "", 64 << 10},
		{"65536B", "", 64 << 10},
		{"1GiB", "", 1 << 30},
	} {
		if got, err := mcpMaxLine(tc.flag, tc.env); err != nil || got != tc.want {
			t.Errorf("--max-line %q, env %q: %d, %v; want %d", tc.flag, tc.env, got, err, tc.want)
		}
	}
	err := run(t.Context(), []string{"mcp"}, func(k string) string {
		if k == "LEASESVC_MCP_MAX_LINE" {
			return "lots"
		}
		return ""
	}, io.Discard, io.Discard)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "LEASESVC_MCP_MAX_LINE") {
		t.Errorf("LEASESVC_MCP_MAX_LINE=lots: %v, want a usage error naming it", err)
	}
}
