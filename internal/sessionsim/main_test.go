package sessionsim

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// defaultChecks is how many seeds a plain go test runs (rapid's own
// default is 100); -rapid.checks or RAPID_CHECKS overrides it.
const defaultChecks = 1000

// TestMain runs the simulation on one processor: the bubbles' goroutines
// hand over to each other without waking another thread (twice as fast,
// and under -race more so), and the scheduler orders fewer things at once.
func TestMain(m *testing.M) {
	flag.Parse()
	set := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		_ = flag.Set("rapid.checks", strconv.Itoa(defaultChecks))
	}
	runtime.GOMAXPROCS(1)
	os.Exit(m.Run())
}
