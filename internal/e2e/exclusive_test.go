package e2e_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestExclusiveHoldsUntilTheTestEnds: while a test holds the lock, another
// holder (here a second descriptor, as another process would have) cannot
// take it; once the test ended, it can.
func TestExclusiveHoldsUntilTheTestEnds(t *testing.T) {
	name := "exclusive-test-" + filepath.Base(t.TempDir())
	path := filepath.Join(os.TempDir(), "leasesvc-"+name+".lock")
	t.Cleanup(func() { _ = os.Remove(path) })
	try := func() error {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	t.Run("holder", func(t *testing.T) {
		e2e.Exclusive(t, name)
		if err := try(); !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Fatalf("a second holder took the lock: %v", err)
		}
	})
	if err := try(); err != nil {
		t.Fatalf("the lock is still held after the test ended: %v", err)
	}
}
