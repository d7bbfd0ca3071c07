// Package adk_test runs the suite of the TypeScript package @leasesvc/adk
// (npm ci, then npm test: the build with tsc --strict, the replica
// scenarios against the real leasesvc binary and the Firestore emulator,
// and the session service's behaviours beside ADK's
// InMemorySessionService) so that ./test.sh covers it.
package adk_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/npmtest"
)

func TestMain(m *testing.M) { os.Exit(emulators.Main(m)) }

// TestADKPackage runs npm test in a copy of the package beside a built copy
// of the SDK; every test must pass and none be skipped.
func TestADKPackage(t *testing.T) {
	npmtest.Run(t, "adk")
}

// TestCoreIsShared: the two packages carry the same core (lease names, runs,
// the fence), file for file, so that a fix reaches both.
func TestCoreIsShared(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "langgraph", "src", "core", "*.ts"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no core files in ../langgraph/src/core: %v", err)
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("src", "core", filepath.Base(f)))
		if err != nil {
			t.Fatalf("src/core lacks %s: %v", filepath.Base(f), err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("src/core/%s differs from ../langgraph/src/core/%s: copy it over", filepath.Base(f), filepath.Base(f))
		}
	}
	own, _ := filepath.Glob(filepath.Join("src", "core", "*.ts"))
	if len(own) != len(files) {
		t.Errorf("src/core has %d files, ../langgraph/src/core %d", len(own), len(files))
	}
}
