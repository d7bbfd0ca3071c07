package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden with the current output")

// runCtl runs leasectl with args and no environment (LEASESVC_URL unset);
// it returns stdout, stderr and the exit status main would use.
func runCtl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, func(string) string { return "" }, &out, &errOut)
	if err != nil {
		code = exitCode(err)
		var ex *exitError
		if !(errors.As(err, &ex) && ex.quiet) {
			errOut.WriteString("leasectl: " + err.Error() + "\n") // as main prints it
		}
	}
	return out.String(), errOut.String(), code
}

// golden compares got with testdata/name.golden, or rewrites it with
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./cmd/leasectl -run Golden -update` to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (if the change is meant, run `go test ./cmd/leasectl -run Golden -update`):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestHelpGolden: `leasectl --help` and `leasectl COMMAND --help` of every
// command print their help on stdout, nothing on stderr, and exit 0; the
// text is testdata/help-*.golden. -h and `leasectl help COMMAND` print the
// same.
func TestHelpGolden(t *testing.T) {
	top, errOut, code := runCtl(t, "--help")
	if code != 0 || errOut != "" {
		t.Fatalf("leasectl --help: exit %d, stderr %q", code, errOut)
	}
	golden(t, "help", top)
	for _, alt := range [][]string{{"-h"}, {"help"}} {
		if out, _, code := runCtl(t, alt...); code != 0 || out != top {
			t.Errorf("leasectl %s: exit %d, output differs from --help", alt, code)
		}
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			if c.summary == "" || c.about == "" || c.example == "" {
				t.Errorf("command %s lacks a summary, about text or example in commands()", c.name)
			}
			if !strings.Contains(top, "  "+c.name+" ") {
				t.Errorf("leasectl --help does not list %s", c.name)
			}
			out, errOut, code := runCtl(t, c.name, "--help")
			if code != 0 || errOut != "" {
				t.Fatalf("leasectl %s --help: exit %d, stderr %q", c.name, code, errOut)
			}
			usage := "Usage: leasectl " + c.name
			if c.args != "" {
				usage += " " + c.args
			}
			example, _, _ := strings.Cut(c.example, "\n")
			for _, want := range []string{usage, c.about, "Example:\n  " + example} {
				if !strings.Contains(out, want) {
					t.Errorf("leasectl %s --help lacks %q:\n%s", c.name, want, out)
				}
			}
			golden(t, "help-"+c.name, out)
			for _, alt := range [][]string{{c.name, "-h"}, {"help", c.name}} {
				if o, _, code := runCtl(t, alt...); code != 0 || o != out {
					t.Errorf("leasectl %s: exit %d, output differs from %s --help", alt, code, c.name)
				}
			}
		})
	}
	if _, _, code := runCtl(t, "run", "--json", "--lease", "x", "--", "true"); code != exitUsage {
		t.Errorf("run --json: exit %d, want %d: run prints no leases and has no --json", code, exitUsage)
	}
	if out, _ := runCtlHelp(t, "run"); strings.Contains(out, "--json") {
		t.Errorf("leasectl run --help lists --json:\n%s", out)
	}
}

func runCtlHelp(t *testing.T, cmd string) (string, int) {
	t.Helper()
	out, _, code := runCtl(t, cmd, "--help")
	return out, code
}

// TestUsageErrors: every mistake on the command line exits 2 with one line
// on stderr that names the flag or argument at fault, prints no usage text,
// and sends no request.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // each must appear in the message
	}{
		{[]string{"acquire", "x", "--holder", "a", "--wait", "90s"}, []string{"--wait 90s", "between 0s and 60s"}},
		{[]string{"acquire", "x", "--holder", "a", "--wait", "-1s"}, []string{"--wait -1s"}},
		{[]string{"acquire", "x", "--holder", "a", "--ttl", "30"}, []string{"--ttl 30", "needs a unit", `"30s"`}},
		{[]string{"acquire", "x", "--holder", "a", "--ttl", "soon"}, []string{"--ttl soon", "not a duration"}},
		{[]string{"acquire", "x", "--holder", "a", "--ttl", "0s"}, []string{"--ttl 0s", "positive"}},
		{[]string{"acquire", "x", "--holder", "a", "--ttl", "1500us"}, []string{"--ttl 1.5ms", "milliseconds"}},
		{[]string{"acquire", "x", "--holder", "a", "--ttl"}, []string{"--ttl needs a value"}},
		{[]string{"acquire", "x", "--holder", "a", "--metadata", "[1]"}, []string{"--metadata", "JSON object"}},
		{[]string{"acquire", "x"}, []string{"--holder is required", "LEASESVC_HOLDER"}},
		{[]string{"acquire", "--holder", "a"}, []string{"missing NAME"}},
		{[]string{"acquire", "x", "y", "--holder", "a"}, []string{"want NAME"}},
		{[]string{"acquire", "x", "--frob"}, []string{"unknown flag --frob"}},
		{[]string{"renew", "x", "--holder", "a"}, []string{"--fencing-token is required"}},
		{[]string{"renew", "x", "--fencing-token", "3"}, []string{"--holder is required"}},
		{[]string{"renew", "x", "--holder", "a", "--fencing-token", "-2"}, []string{"--fencing-token -2"}},
		{[]string{"renew", "x", "--holder", "a", "--fencing-token", "abc"}, []string{"--fencing-token abc", "not a whole number"}},
		{[]string{"renew", "x", "--holder", "a", "--fencing-token", "3", "--ttl", "5"}, []string{"--ttl 5", "needs a unit"}},
		{[]string{"release", "x", "--holder", "a"}, []string{"--fencing-token is required"}},
		{[]string{"revoke", "x"}, []string{"--reason is required"}},
		{[]string{"revoke", "x", "--reason", "r", "--fencing-token", "-1"}, []string{"--fencing-token -1"}},
		{[]string{"list", "--page-size", "-5"}, []string{"--page-size -5"}},
		{[]string{"list", "extra"}, []string{"takes no argument"}},
		{[]string{"watch"}, []string{"missing NAME"}},
		{[]string{"watch", "x", "--missing-ok=maybe"}, []string{"--missing-ok maybe"}},
		{[]string{"run", "--lease", "x", "--ttl", "5s", "--grace", "5s", "--", "true"}, []string{"--grace 5s", "--ttl 5s", "below 1s"}},
		{[]string{"run", "--lease", "x", "--ttl", "30", "--", "true"}, []string{"--ttl 30", "needs a unit"}},
		{[]string{"run", "--lease", "x", "--grace", "-1s", "--", "true"}, []string{"--grace -1s"}},
		{[]string{"run", "--", "true"}, []string{"missing NAME"}},
		{[]string{"run", "--ttl", "5s"}, []string{"missing NAME"}},
		{[]string{"run", "--lease", "x"}, []string{"missing CMD"}},
		{[]string{"run", "x"}, []string{"missing CMD"}},
		{[]string{"run", "x", "--ttl", "5s", "--"}, []string{"missing CMD"}},
		{[]string{"run", "x", "--lease", "y", "--", "true"}, []string{`"x" or "y"`, "once"}},
		{[]string{"run", "x", "--ttl", "30", "--", "true"}, []string{"--ttl 30", "needs a unit"}},
		// A stray argument before -- would run as CMD (issue 38 item 7).
		{[]string{"run", "--lease", "x", "y", "--", "true"}, []string{`unexpected "y" before --`, `the lease is "x"`}},
		{[]string{"run", "x", "--ttl", "5s", "y", "z", "--", "true"}, []string{`unexpected "y z" before --`}},
		{[]string{"run", "x", "--window", "100ms", "--", "true"}, []string{"--window 100ms", "200ms … 1m0s"}},
		{[]string{"run", "x", "--window", "2s", "--grace", "500ms", "--", "true"}, []string{"--grace 500ms", "--window 2s", "below 400ms"}},
		{[]string{"mcp", "--window", "90s"}, []string{"--window 1m30s", "200ms … 1m0s"}},
		{[]string{"--url"}, []string{"--url needs a value"}},
		{[]string{"--url", "http://x"}, []string{"missing COMMAND"}},
		{[]string{"--frob", "get", "x"}, []string{"unknown flag --frob", "before the command"}},
		{[]string{"--url=http://x", "--holder", "a", "acquire", "x"}, []string{"unknown flag --holder", "before the command"}},
		{[]string{"run", "--lease", "x", "--holder", strings.Repeat("h", 300), "--", "true"}, []string{"--holder"}},
		{[]string{"get", "x", "--token", "a", "--token-file", "f"}, []string{"--token and --token-file"}},
		{[]string{"completion"}, []string{"missing SHELL"}},
		{[]string{"completion", "tcsh"}, []string{`"tcsh"`, "bash, zsh or fish"}},
		{[]string{"version", "--url", "x"}, []string{"unknown flag --url"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
	} {
		name := strings.Join(tc.args, " ")
		t.Run(name, func(t *testing.T) {
			// A service that fails the test if any request reaches it.
			out, errOut, code := runCtlAt(t, "http://127.0.0.1:1", tc.args...)
			if code != exitUsage {
				t.Fatalf("leasectl %s: exit %d, want %d (usage); stderr %q", name, code, exitUsage, errOut)
			}
			if out != "" {
				t.Errorf("leasectl %s printed on stdout: %q", name, out)
			}
			if n := strings.Count(strings.TrimSpace(errOut), "\n"); n != 0 {
				t.Errorf("leasectl %s printed %d lines on stderr, want one:\n%s", name, n+1, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("leasectl %s: stderr %q lacks %q", name, errOut, w)
				}
			}
			for _, bad := range []string{"ElectorConfig", "waitMs", "ttlMs", "flag:", "Usage:"} {
				if strings.Contains(errOut, bad) {
					t.Errorf("leasectl %s: stderr %q says %q: speak the flags' names, in one line", name, errOut, bad)
				}
			}
		})
	}
	// No command: a one-line pointer to --help on stderr, exit 2.
	if out, errOut, code := runCtl(t); code != exitUsage || out != "" || !strings.Contains(errOut, "leasectl --help") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("leasectl without a command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// runCtlAt is runCtl with LEASESVC_URL set.
func runCtlAt(t *testing.T, url string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, func(k string) string {
		if k == "LEASESVC_URL" {
			return url
		}
		return ""
	}, &out, &errOut)
	if err != nil {
		code = exitCode(err)
		errOut.WriteString("leasectl: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), code
}

// TestServiceRefusalsNameTheFlag: an argument the service refuses
// (invalid_argument) is a usage error naming the flag, not the API field.
func TestServiceRefusalsNameTheFlag(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"}) // TTLs 1s … 1h
	name := e2e.UniqueName("refused")
	_, errOut, code := runCtlAt(t, svc.URL, "acquire", name, "--holder", "a", "--ttl", "500ms")
	if code != exitUsage || !strings.Contains(errOut, "--ttl") || strings.Contains(errOut, "ttlMs") {
		t.Errorf("acquire --ttl 500ms: exit %d, stderr %q; want exit 2 naming --ttl", code, errOut)
	}
	_, errOut, code = runCtlAt(t, svc.URL, "acquire", "bad:name", "--holder", "a")
	if code != exitUsage || !strings.Contains(errOut, "NAME") {
		t.Errorf("acquire of a bad name: exit %d, stderr %q; want exit 2 naming NAME", code, errOut)
	}
	// LEASESVC_HOLDER stands in for --holder, and renew uses it too.
	env := func(k string) string {
		return map[string]string{"LEASESVC_URL": svc.URL, "LEASESVC_HOLDER": "agent-env"}[k]
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"acquire", name, "--json"}, env, &out, &out); err != nil || !strings.Contains(out.String(), `"holder":"agent-env"`) {
		t.Fatalf("acquire with LEASESVC_HOLDER: %v %s", err, out.String())
	}
	if err := run(t.Context(), []string{"renew", name, "--fencing-token", "1"}, env, &out, &out); err != nil {
		t.Fatalf("renew with LEASESVC_HOLDER: %v", err)
	}
}

// TestWatchOfMissingLease: watching a lease that was never acquired exits 5
// (not found) with one line saying so, rather than printing a zero lease;
// --missing-ok waits for it instead (TestWatchPrintsChanges).
func TestWatchOfMissingLease(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	for _, args := range [][]string{{"watch", "never.acquired"}, {"watch", "never.acquired", "--json"}} {
		out, errOut, code := runCtlAt(t, svc.URL, args...)
		if code != exitNotFound || out != "" || !strings.Contains(errOut, `no lease "never.acquired"`) || !strings.Contains(errOut, "--missing-ok") {
			t.Errorf("leasectl %s: exit %d, stdout %q, stderr %q; want exit %d and a not-found line", args, code, out, errOut, exitNotFound)
		}
	}
}

// TestVersion: `leasectl version` prints the stamped version, else the
// module's, and the Go version.
func TestVersion(t *testing.T) {
	out, _, code := runCtl(t, "version")
	if code != 0 || !strings.HasPrefix(out, "leasectl ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("leasectl version: exit %d, %q", code, out)
	}
	if alias, _, code := runCtl(t, "--version"); code != 0 || alias != out {
		t.Errorf("leasectl --version: exit %d, %q; want what version prints", code, alias)
	}
	info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/leasesvc/leasesvc", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		stamped string
		info    *debug.BuildInfo
		want    []string
	}{
		{"", info, []string{"leasectl v1.4.0\n", "commit   abc123, modified\n", "module   github.com/leasesvc/leasesvc\n"}},
		{"v2.0.0-rc1", info, []string{"leasectl v2.0.0-rc1\n"}},
		{"", nil, []string{"leasectl (devel)\n"}},
	} {
		got := versionText(tc.stamped, tc.info)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("versionText(%q, …) = %q, lacks %q", tc.stamped, got, w)
			}
		}
	}
}

// TestCompletionGolden: the scripts of `leasectl completion SHELL` (exit 0,
// on stdout) are testdata/completion-*.golden, and each lists every command
// and every flag of every command.
func TestCompletionGolden(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := runCtl(t, "completion", shell)
		if code != 0 || errOut != "" {
			t.Fatalf("completion %s: exit %d, stderr %q", shell, code, errOut)
		}
		golden(t, "completion-"+shell, out)
		cmds, err := completionCommands(t.Context(), &env{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if !strings.Contains(out, c.name) {
				t.Errorf("the %s script lacks the command %s", shell, c.name)
			}
			for _, f := range c.flags {
				if !strings.Contains(out, f.Name) {
					t.Errorf("the %s script lacks --%s of %s", shell, f.Name, c.name)
				}
			}
		}
	}
}

// TestBashCompletionCompletes loads the bash script into bash and asks it
// for completions.
func TestBashCompletionCompletes(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("bash is not on PATH, and CI=true requires the completion test: install bash")
		}
		t.Skip("bash is not on PATH: skipping the bash completion test (with CI=true this fails)")
	}
	script, _, code := runCtl(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	path := filepath.Join(t.TempDir(), "leasectl.bash")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) []string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, strconv.Quote(w))
		}
		prog := "source " + strconv.Quote(path) + "\n" +
			"COMP_WORDS=(" + strings.Join(quoted, " ") + ")\n" +
			"COMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n" +
			"_leasectl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", prog)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"leasectl ac", []string{"acquire"}},
		{"leasectl re", []string{"release", "renew", "revoke"}},
		{"leasectl acquire x --w", []string{"--wait"}},
		{"leasectl run --g", []string{"--grace"}},
		{"leasectl completion ", []string{"bash", "zsh", "fish"}},
		{"leasectl help wa", []string{"watch"}},
		{"leasectl acquire x --ttl ", nil},       // a value: nothing offered
		{"leasectl run --lease x -- ls --", nil}, // CMD's own arguments
		{"leasectl run x --ttl 3s -- ls --", nil},
		{"leasectl --url http://x ac", []string{"acquire"}},
		{"leasectl --url http://x --json run x --g", []string{"--grace"}},
		{"leasectl --ur", []string{"--url"}},
		{"leasectl --token-file f help wa", []string{"watch"}},
		{"leasectl --url ", nil}, // a value
	} {
		got := complete(tc.line)
		slices.Sort(got)
		slices.Sort(tc.want)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("completing %q: got %q, want %q", tc.line, got, tc.want)
		}
	}
}
