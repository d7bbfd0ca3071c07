// Package npmtest runs the TypeScript packages' tests from Go tests:
// NeedNode checks for Node.js and npm (the SDK's tests and the
// integrations' call it), and Run runs the npm test of a package under
// integrations/: it copies the package and the SDK it
// depends on (file:../../sdk/typescript) into a tree of the same shape
// outside the checkout, builds the SDK there, and runs npm ci and npm test
// in the copy with the leasesvc binary and a Firestore emulator, so that
// nothing is shared with a developer's checkout.
//
// The tree is kept in the user's cache directory, one per package and
// content of the manifests and lock files, so that a later run copies the
// sources afresh but keeps node_modules and skips npm ci (about a minute
// for the ADK's 200 MB of dependencies on a small machine). A file lock
// keeps two runs of one package apart.
package npmtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// NeedNode fails the test under CI=true when node (20 or later) or npm is
// missing, and skips it elsewhere.
func NeedNode(t testing.TB) {
	t.Helper()
	missing := func(why string) {
		msg := why + ": install Node.js 20 or later with npm (apt-get install nodejs npm) to run the TypeScript tests"
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

// Run runs npm ci and npm test of integrations/pkg (the test's working
// directory is that package's) and returns npm test's output. It fails the
// test unless node's test runner reports passing tests, none failed and
// none skipped.
func Run(t *testing.T, pkg string) string {
	t.Helper()
	NeedNode(t)
	start := time.Now()
	host := emulators.Firestore(t)
	t.Logf("Firestore emulator: %v", time.Since(start).Round(time.Second))
	start = time.Now()
	bin := e2e.Binary(t)
	t.Logf("leasesvc binary: %v", time.Since(start).Round(time.Second))
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	srcSDK := filepath.Join(repo, "sdk", "typescript")
	srcPkg := filepath.Join(repo, "integrations", pkg)
	root := cacheRoot(t, pkg, srcSDK, srcPkg)
	sdk := filepath.Join(root, "sdk", "typescript")
	dir := filepath.Join(root, "integrations", pkg)
	refresh(t, srcSDK, sdk)
	refresh(t, srcPkg, dir)

	npm := func(in string, args ...string) string {
		t.Helper()
		start := time.Now()
		defer func() {
			t.Logf("npm %s in %s: %v", strings.Join(args, " "), filepath.Base(in), time.Since(start).Round(time.Second))
		}()
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir = in
		cmd.Env = append(os.Environ(), "LEASESVC_BIN="+bin, "LEASESVC_REPO="+repo, "FIRESTORE_EMULATOR_HOST="+host, "NO_COLOR=1", "npm_config_audit=false", "npm_config_fund=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm %s in %s: %v\n%s", strings.Join(args, " "), in, err, out)
		}
		return string(out)
	}
	for _, d := range []string{sdk, dir} {
		if _, err := os.Stat(filepath.Join(d, "node_modules", ".package-lock.json")); err == nil {
			continue // installed by an earlier run from the same lock file
		}
		if err := os.RemoveAll(filepath.Join(d, "node_modules")); err != nil {
			t.Fatal(err)
		}
		npm(d, "ci", "--prefer-offline")
	}
	npm(sdk, "run", "build")
	out := npm(dir, "test")
	for _, line := range strings.Split(out, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "# ") && !strings.HasPrefix(l, "# Subtest") && !strings.Contains(l, "Warning") {
			t.Log(l)
		}
	}
	if !strings.Contains(out, "# fail 0") || !strings.Contains(out, "# skipped 0") || strings.Contains(out, "# tests 0") {
		t.Fatalf("npm test did not report a passing run:\n%s", out)
	}
	return out
}

// cacheRoot returns the package's tree in the user's cache directory (a
// temporary one when there is none), named by the content of the
// manifests and lock files, locked for this test until it ends.
func cacheRoot(t *testing.T, pkg string, dirs ...string) string {
	t.Helper()
	h := sha256.New()
	for _, d := range dirs {
		for _, f := range []string{"package.json", "package-lock.json"} {
			b, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(h, "%s/%s %d\n", filepath.Base(d), f, len(b))
			h.Write(b)
		}
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return t.TempDir()
	}
	root := filepath.Join(base, "leasesvc-npmtest", fmt.Sprintf("%s-%x", pkg, h.Sum(nil)[:8]))
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("lock %s: %v", root, err)
	}
	t.Cleanup(func() { _ = lock.Close() }) // closing releases the lock
	return root
}

// refresh makes dst a copy of src's files, keeping only dst's node_modules.
func refresh(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "node_modules" {
			if err := os.RemoveAll(filepath.Join(dst, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyTree(t, src, dst)
}

// copyTree copies the files of src (not node_modules, dist, build) to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "dist", "build":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), ".tgz") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}
