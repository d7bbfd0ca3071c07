package emulatortests

import (
	"os"
	"testing"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
)

// TestMain starts no emulator itself: each test asks for the ones it needs,
// and Main stops every one of them when the tests end.
func TestMain(m *testing.M) { os.Exit(emulators.Main(m)) }
