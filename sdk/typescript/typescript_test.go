// Package typescript_test runs the TypeScript SDK's own suite (npm ci, then
// npm test: the build, unit tests against an in-process fake service, tests
// and the conformance agent against the real binary, the exactly-once
// example) so that ./test.sh covers it.
package typescript_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/fence/pgfence/pgfencetest"
	"github.com/leasesvc/leasesvc/internal/e2e"
	"github.com/leasesvc/leasesvc/internal/npmtest"
)

// TestTypeScriptSDK builds leasesvc, copies the package (sources, tests,
// lock file; not node_modules) to a temporary directory so that it shares
// nothing with a developer's checkout or the cross-language driver, and
// runs npm ci and npm test there.
func TestTypeScriptSDK(t *testing.T) {
	npmtest.NeedNode(t)
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
		env = append(env, "LEASESVC_PG_URL="+pg, "LEASESVC_PGFENCE_GO_SCHEMAS="+pgfencetest.GoSchemas(t))
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
