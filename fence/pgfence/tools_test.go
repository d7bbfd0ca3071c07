package pgfence_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the module's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// systemPython is the interpreter Debian's python3-psycopg2 is for.
const systemPython = "/usr/bin/python3"

// hasPsycopg2 reports whether python imports psycopg2.
func hasPsycopg2(python string) bool {
	return exec.Command(python, "-c", "import psycopg2").Run() == nil
}

// psycopg2Once makes the tests try to install psycopg2 once.
var psycopg2Once sync.Once

// pythonWithPsycopg2 returns a Python 3 that imports psycopg2: the
// system's (installing Debian's python3-psycopg2 with apt-get when root and
// it is missing), or the one on PATH. Without one the test fails under
// CI=true and is skipped elsewhere, saying what to install.
func pythonWithPsycopg2(t *testing.T) string {
	t.Helper()
	if hasPsycopg2(systemPython) {
		return systemPython
	}
	if p, err := exec.LookPath("python3"); err == nil && hasPsycopg2(p) {
		return p
	}
	if _, err := os.Stat(systemPython); err == nil && os.Geteuid() == 0 {
		psycopg2Once.Do(func() { installPsycopg2(t) })
		if hasPsycopg2(systemPython) {
			return systemPython
		}
	}
	msg := "the Python pgfence tests need psycopg2: apt-get install -y python3-psycopg2 (for " + systemPython + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// installPsycopg2 installs Debian's python3-psycopg2 with apt-get,
// quietly; a failure is logged and left to pythonWithPsycopg2.
func installPsycopg2(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return
	}
	apt := func(args ...string) error {
		// Another test may be installing (chromium, spin): wait for dpkg's lock.
		args = append([]string{"-q", "-o", "DPkg::Lock::Timeout=300"}, args...)
		cmd := exec.CommandContext(context.Background(), "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("apt-get %v: %v\n%s", args, err, out)
		}
		return err
	}
	t.Log("installing psycopg2: apt-get install -y python3-psycopg2")
	install := []string{"install", "-y", "--no-install-recommends", "python3-psycopg2"}
	if apt(install...) != nil {
		_ = apt("update")
		_ = apt(install...)
	}
}

// walkthroughHeading is the section of docs/fencing.md whose programs the
// tests run (sdk/typescript/test/pgfence-doc.test.ts reads it too).
const walkthroughHeading = "## A walkthrough: PostgreSQL from Go, Python and TypeScript"

// walkthrough returns the first code block of info string lang under
// "### heading" in docs/fencing.md's walkthrough, as it stands.
func walkthrough(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "fencing.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+walkthroughHeading+"\n")
	if !ok {
		t.Fatalf("docs/fencing.md has no %q section", walkthroughHeading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, sub, ok := strings.Cut(section, "\n### "+heading+"\n")
	if !ok {
		t.Fatalf("the walkthrough has no %q", "### "+heading)
	}
	_, code, ok := strings.Cut(sub, "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("%q has no ```%s block", "### "+heading, lang)
	}
	code, _, ok = strings.Cut(code, "\n```\n")
	if !ok {
		t.Fatalf("the ```%s block of %q does not end", lang, "### "+heading)
	}
	return code + "\n"
}

// run runs cmd, failing the test with its output if it fails, and returns
// its standard output.
func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, stdout.String(), stderr.String())
	}
	if s := stderr.String(); s != "" {
		t.Logf("%s (stderr):\n%s", filepath.Base(cmd.Args[0]), s)
	}
	return stdout.String()
}

// lines splits output into its lines, without the last newline.
func lines(output string) []string {
	return strings.Split(strings.TrimSuffix(output, "\n"), "\n")
}

// steps is what a walkthrough prints when agent-1's holding got token n.
func steps(n int) []string {
	return []string{
		fmt.Sprintf("agent-1 wrote order-1 with token %d", n),
		fmt.Sprintf("agent-2 fenced orders_table with token %d", n+1),
		"agent-1's late write refused: stale",
		fmt.Sprintf("agent-2 wrote order-2 with token %d", n+1),
	}
}
