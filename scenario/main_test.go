package scenario

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, or, when started by leasectl as a CMD (see
// childEnv), the child process of TestLeasectlRunStopsChildBeforeTakeover.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}
