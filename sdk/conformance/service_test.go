package conformance

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// repoRoot is the module's root directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// need finds tool on PATH; without it the test fails under CI=true and is
// skipped elsewhere, saying what to install.
func need(t testing.TB, tool, install string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	msg := tool + " is not installed: " + install
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startService runs leasesvc with env added, logging warnings only unless
// env says otherwise; the test may freeze it.
func startService(t testing.TB, env map[string]string) *e2e.Service {
	t.Helper()
	all := map[string]string{"LEASESVC_LOG_LEVEL": "warn"}
	maps.Copy(all, env)
	return e2e.StartService(t, all)
}
