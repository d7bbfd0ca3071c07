package pgfence_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/pgfence"
)

// TestDeposedLeaderRefused, on a throwaway PostgreSQL: after the next
// leader (token 2) wrote, the deposed leader's late write (token 1) is
// refused and nothing of its transaction applied; a forged proof, a proof
// for another lease and a failing transaction change nothing either.
func TestDeposedLeaderRefused(t *testing.T) {
	cl := pgtest.Start(t)
	ctx := t.Context()
	db, err := pgx.Connect(ctx, cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, q := range []string{pgfence.Schema(""), `CREATE TABLE items (id text PRIMARY KEY, by_token bigint)`} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := fence.KeyID(pub)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	v, _ := fence.NewVerifier(fence.StaticKeys{kid: pub}, "leasesvc")
	f, err := pgfence.New(db, v, "")
	if err != nil {
		t.Fatal(err)
	}
	proof := func(key ed25519.PrivateKey, name string, token int64) string {
		p, err := fence.Sign(key, kid, fence.Claims{Lease: name, FencingToken: token, Holder: "w", IssuedAt: 1, Issuer: "leasesvc"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	insert := func(id string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO items VALUES ($1, 0)`, id)
			return err
		}
	}
	if _, err := f.Write(ctx, "leader", "orders", proof(priv, "leader", 1), insert("first")); err != nil {
		t.Fatalf("leader 1: %v", err)
	}
	if _, err := f.Write(ctx, "leader", "orders", proof(priv, "leader", 2), insert("second")); err != nil {
		t.Fatalf("leader 2: %v", err)
	}
	ran := false
	for _, tc := range []struct {
		name, proof string
		want        error
	}{
		{"deposed leader's late write", proof(priv, "leader", 1), fence.ErrStale},
		{"forged token", proof(stranger, "leader", 99), fence.ErrSignature},
		{"other lease", proof(priv, "other", 99), fence.ErrOtherLease},
	} {
		_, err := f.Write(ctx, "leader", "orders", tc.proof, func(tx pgx.Tx) error { ran = true; return insert("late")(tx) })
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	boom := errors.New("boom")
	if _, err := f.Write(ctx, "leader", "orders", proof(priv, "leader", 3), func(tx pgx.Tx) error {
		if err := insert("partial")(tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failing transaction: %v, want boom", err)
	}
	if ran {
		t.Error("a refused proof ran the caller's writes")
	}
	var ids []string
	rows, _ := db.Query(ctx, `SELECT id FROM items ORDER BY id`)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var token int64
	if err := db.QueryRow(ctx, `SELECT fencing_token FROM leasesvc_fence WHERE resource = 'orders'`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != "first" || ids[1] != "second" || token != 2 {
		t.Fatalf("rows %v, stored token %d; want [first second] and 2", ids, token)
	}
}
