package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// contendedStore loses every attempt to a concurrent writer, counting them.
type contendedStore struct {
	*memory.Store
	tries int
}

func (s *contendedStore) Try(context.Context, string, backend.Decide) (backend.Snapshot, error) {
	s.tries++
	return backend.Snapshot{}, backend.ErrConflict
}

// TestNewManagerTakesLoopOptions: the loop options given to NewManager (as
// the service passes its backend's, backend.Opened.Loop) drive the
// Manager's Loop: with WithMaxAttempts(3) and a retry hook, an acquire that
// keeps losing makes three attempts, reports two retries and fails with
// lease.ErrConflict.
func TestNewManagerTakesLoopOptions(t *testing.T) {
	s := &contendedStore{Store: memory.New()}
	var retries []string
	m, err := lease.NewManager(s, lease.Config{}, backend.WithMaxAttempts(3), backend.WithRetryHook(func(reason string) { retries = append(retries, reason) }))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Acquire(t.Context(), lease.AcquireRequest{Name: "a", Holder: "h", TTL: time.Second})
	if !errors.Is(err, lease.ErrConflict) || s.tries != 3 || len(retries) != 2 {
		t.Fatalf("Acquire = %v after %d attempts and retries %q; want lease.ErrConflict after 3 attempts and 2 retries", err, s.tries, retries)
	}
}
