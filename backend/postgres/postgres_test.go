package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend/backendtest"
	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
)

func TestConformance(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), pgtest.Start(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := postgres.New(pool)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	backendtest.Run(t, func(*testing.T) backendtest.Harness { return backendtest.Harness{Store: s} }, backendtest.Options{})
}
