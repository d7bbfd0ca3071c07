// Package langgraph_test runs the suite of the TypeScript package
// @leasesvc/langgraph (npm ci, then npm test: the build with tsc --strict,
// the replica scenarios against the real leasesvc binary and the Firestore
// emulator, and LangGraph's checkpoint-validation suite) so that ./test.sh
// covers it.
package langgraph_test

import (
	"os"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/npmtest"
)

func TestMain(m *testing.M) { os.Exit(emulators.Main(m)) }

// TestLangGraphPackage runs npm test in a copy of the package beside a
// built copy of the SDK; every test must pass and none be skipped, and the
// validation suite must pass whole.
func TestLangGraphPackage(t *testing.T) {
	out := npmtest.Run(t, "langgraph")
	if !strings.Contains(out, "718 passed") || strings.Contains(out, " failed") {
		t.Fatalf("the checkpoint-validation suite did not pass whole (718 tests):\n%s", out)
	}
}
