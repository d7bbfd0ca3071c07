package postgres_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend/backendtest"
	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
)

// migrated returns a pool of a throwaway cluster whose table Migrate
// created, closed when t ends.
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pgtest.Start(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.New(pool).Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestConformance(t *testing.T) {
	pool := migrated(t)
	// Without batching (the default) and with it: backend.Loop then hands
	// the attempts that arrive while a transaction is in flight to
	// TryBatch together.
	for _, n := range []int{postgres.DefaultBatchMax, 100} {
		t.Run(fmt.Sprintf("BatchMax=%d", n), func(t *testing.T) {
			s := postgres.New(pool, postgres.WithBatchMax(n))
			backendtest.Run(t, func(*testing.T) backendtest.Harness { return backendtest.Harness{Store: s} }, backendtest.Options{})
		})
	}
}
