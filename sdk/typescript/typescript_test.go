// Package typescript_test runs the TypeScript SDK's own suite (npm ci, then
// npm test: the build, unit tests against an in-process fake service, tests
// and the conformance agent against the real binary, the exactly-once
// example) so that ./test.sh covers it.
package typescript_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/fence/pgfence"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// needNode returns the paths of node and npm, failing the test under
// CI=true when they are missing (or node is older than 20) and skipping it
// elsewhere.
func needNode(t *testing.T) {
	t.Helper()
	missing := func(why string) {
		msg := why + ": install Node.js 20 or later with npm (apt-get install nodejs npm) to run the TypeScript SDK's tests"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("npm is not installed")
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		missing("node is not installed")
	}
	m := regexp.MustCompile(`^v(\d+)\.`).FindSubmatch(out)
	if m == nil {
		missing(fmt.Sprintf("node --version said %q", bytes.TrimSpace(out)))
	}
	if major, _ := strconv.Atoi(string(m[1])); major < 20 {
		missing(fmt.Sprintf("node is %s", bytes.TrimSpace(out)))
	}
}

// TestTypeScriptSDK builds leasesvc, copies the package (sources, tests,
// lock file; not node_modules) to a temporary directory so that it shares
// nothing with a developer's checkout or the cross-language driver, and
// runs npm ci and npm test there.
func TestTypeScriptSDK(t *testing.T) {
	needNode(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	bin := e2e.Binary(t)

	dir := copyPackage(t)
	repo, err := filepath.Abs("../..") // the copy is outside it: tests find shared files here
	if err != nil {
		t.Fatal(err)
	}

	env := append(os.Environ(), "LEASESVC_BIN="+bin, "LEASESVC_REPO="+repo, "NO_COLOR=1")
	// The pgfence tests' PostgreSQL and Go's DDL; without the server
	// binaries (and without CI=true) they skip.
	pg := postgres(t)
	if pg != "" {
		env = append(env, "LEASESVC_PG_URL="+pg, "LEASESVC_PGFENCE_GO_SCHEMAS="+goSchemas(t))
	}
	npm := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	npm("ci", "--no-audit", "--no-fund")
	out := npm("test")
	// The test runner's summary and diagnostics (freeze measurements,
	// exactly-once counts) go to the Go test's log.
	for _, line := range strings.Split(out, "\n") {
		l := strings.TrimSpace(line)
		if strings.HasPrefix(l, "# ") && !strings.HasPrefix(l, "# Subtest") {
			t.Log(l)
		}
	}
	// With the binary (and PostgreSQL) given, nothing may be skipped.
	if !strings.Contains(out, "# fail 0") || (pg != "" && !strings.Contains(out, "# skipped 0")) || strings.Contains(out, "# tests 0") {
		t.Fatalf("npm test did not report a passing run:\n%s", out)
	}
}

// postgres starts a throwaway PostgreSQL for the pgfence tests and returns
// its URL, or "" without the server binaries (a failure under CI=true).
func postgres(t *testing.T) string {
	t.Helper()
	found := false
	t.Run("postgres", func(t *testing.T) {
		pgtest.Bin(t) // skips this subtest without the binaries, fails it under CI=true
		found = true
	})
	if !found {
		return ""
	}
	return pgtest.Start(t).URL
}

// goSchemas is pgfence.Schema of a few table names, by name, for the
// TypeScript helper's to be compared with.
func goSchemas(t *testing.T) string {
	t.Helper()
	m := map[string]string{}
	for _, table := range []string{"", "leasesvc_fence", `Odd "quoted" 100% name`, "a\x00b"} {
		m[table] = pgfence.Schema(table)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// copyPackage copies the package (manifest, lock file, README, sources,
// tests, examples; not node_modules, dist or build) to a temporary
// directory and returns it.
func copyPackage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json", "tsconfig.test.json", "README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"src", "test", "examples"} {
		if err := os.CopyFS(filepath.Join(dir, d), os.DirFS(d)); err != nil {
			t.Fatalf("copy %s: %v", d, err)
		}
	}
	return dir
}
