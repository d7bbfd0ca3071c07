package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Exclusive holds a machine-wide lock named name (a file under the
// temporary directory, locked with flock) until the test ends, waiting for
// it first. Tests in different packages, which go test runs as separate
// processes at once, take the same lock to keep from running beside each
// other: the fault-injected safety runs load every core for minutes, and
// the freeze cases assert that an agent's own timer fires within its
// margin, which a starved process cannot promise.
func Exclusive(t testing.TB, name string) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "leasesvc-"+name+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("e2e.Exclusive %s: %v", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("e2e.Exclusive %s: flock: %v", name, err)
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	})
}
