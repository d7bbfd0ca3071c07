package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpShowsByteDefaultsInIECUnits: -h writes the default of every
// byte-valued setting as the number of bytes it parses and its size in IEC
// units (as GOMEMLIMIT writes 400MiB), and every other default unchanged.
func TestHelpShowsByteDefaultsInIECUnits(t *testing.T) {
	declared := map[string]string{}
	for _, r := range settingRows() {
		declared[r.env] = r.def
	}
	for env := range byteSettings {
		if _, ok := declared[env]; !ok {
			t.Errorf("byteSettings names %s, which no setting declares", env)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr); err != errHelp {
		t.Fatalf("run(-h) = %v, want errHelp", err)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			lines[f[0]] = l
		}
	}
	for env, want := range map[string]string{
		"LEASESVC_MEMORY_BUDGET":       " 117440512 (112 MiB) ",
		"LEASESVC_MEMORY_PER_CALLER":   " 29360128 (28 MiB) ",
		"LEASESVC_STREAM_BUFFER":       " 262144 (256 KiB) ",
		"LEASESVC_MAX_PAGE_BYTES":      " 4194304 (4 MiB) ",
		"LEASESVC_SESSION_MAX_MESSAGE": " 1048576 (1 MiB) ",
		"LEASESVC_SESSION_OUT_BUFFER":  " 262144 (256 KiB) ",
		"LEASESVC_RECENT_EVENTS":       " 2048 ", // a count, not bytes
		"LEASESVC_MAX_STREAMS":         " 10000 ",
	} {
		if !strings.Contains(lines[env], want) {
			t.Errorf("-h line of %s = %q, want it to contain %q", env, lines[env], want)
		}
	}
	for _, c := range []struct{ def, want string }{
		{"1536", "1536 (1.5 KiB)"},
		{"1073741824", "1073741824 (1 GiB)"},
		{"1000000", "1000000 (976.56 KiB)"},
		{"512", "512"},
		{"off", "off"},
	} {
		if got := helpDefault("LEASESVC_MEMORY_BUDGET", c.def); got != c.want {
			t.Errorf("helpDefault(%q) = %q, want %q", c.def, got, c.want)
		}
	}
}
