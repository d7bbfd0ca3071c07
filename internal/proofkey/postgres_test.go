package proofkey_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/internal/proofkey"
)

// TestTwoInstancesPostgres, on a throwaway PostgreSQL with two stores (two
// instances): a proof issued by either verifies through either's JWKS,
// and after an instance restarts (a new key), the proofs it issued before
// still verify through both.
func TestTwoInstancesPostgres(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), pgtest.Start(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.New(pool).Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := publish(t, postgres.New(pool), "a", proofkey.Config{})
	b := publish(t, postgres.New(pool), "b", proofkey.Config{})
	pa, _ := a.Sign(held("orders", 1))
	pb, _ := b.Sign(held("orders", 2))
	for _, via := range []*proofkey.Issuer{a, b} {
		for _, tc := range []struct{ kid, proof string }{{a.Kid(), pa}, {b.Kid(), pb}} {
			if _, err := verify(t, via, tc.kid, tc.proof); err != nil {
				t.Fatalf("proof under %s through %s's JWKS: %v", tc.kid, via.Kid(), err)
			}
		}
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	a2 := publish(t, postgres.New(pool), "a", proofkey.Config{})
	for _, via := range []*proofkey.Issuer{a2, b} {
		if _, err := verify(t, via, "unknown", pa); err != nil {
			t.Fatalf("a proof of the stopped instance through %s's JWKS: %v", via.Kid(), err)
		}
	}
}
