package pgfence_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/pgfence"
)

// signer signs proofs with a key its Verifier trusts.
type signer struct {
	t    *testing.T
	priv ed25519.PrivateKey
	kid  string
	v    *fence.Verifier
}

func newSigner(t *testing.T) signer {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kid := fence.KeyID(pub)
	v, err := fence.NewVerifier(fence.StaticKeys{kid: pub}, "leasesvc")
	if err != nil {
		t.Fatal(err)
	}
	return signer{t, priv, kid, v}
}

func (s signer) proof(lease string, token int64) string {
	p, err := fence.Sign(s.priv, s.kid, fence.Claims{Lease: lease, FencingToken: token, Holder: "w", IssuedAt: 1, Issuer: "leasesvc"})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

// startDB starts a throwaway PostgreSQL with the token table and a table
// items, and returns a pool whose sessions use isolation ("" the default).
func startDB(t *testing.T, isolation string) *pgxpool.Pool {
	t.Helper()
	cl := pgtest.Start(t)
	cfg, err := pgxpool.ParseConfig(cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	if isolation != "" {
		cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = isolation
	}
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	for _, q := range []string{pgfence.Schema(""), `CREATE TABLE items (id text PRIMARY KEY)`} {
		if _, err := db.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func insertItem(ctx context.Context, id string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO items VALUES ($1)`, id)
		return err
	}
}

// stored returns the lease and token stored for resource; "" and 0 if none.
func stored(t *testing.T, db *pgxpool.Pool, resource string) (string, int64) {
	t.Helper()
	var lease string
	var token int64
	err := db.QueryRow(t.Context(), `SELECT lease, fencing_token FROM leasesvc_fence WHERE resource = $1`, resource).Scan(&lease, &token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return lease, token
}

func items(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	rows, _ := db.Query(t.Context(), `SELECT id FROM items ORDER BY id`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestExpectedLease (§17 rule 4): a genuine proof for another lease than
// the one that fences the resource is refused, other_lease, and stores
// nothing, for a resource never written too: "orders" fenced by lease
// "orders" is not bound to "scratch.tmp" by a proof of that lease writing
// first, and the real leader then writes. An empty lease is refused
// before anything else; a row of another lease left from before refuses.
func TestExpectedLease(t *testing.T) {
	db := startDB(t, "")
	ctx := t.Context()
	s := newSigner(t)
	f, err := pgfence.New(db, s.v, "")
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	spy := func(tx pgx.Tx) error { ran = true; return insertItem(ctx, "scratch")(tx) }
	_, err = f.Write(ctx, "orders", "orders", s.proof("scratch.tmp", 99), spy)
	if !errors.Is(err, fence.ErrOtherLease) || fence.Reason(err) != "other_lease" {
		t.Fatalf("another lease's proof for a resource never written: %v (reason %q), want other_lease", err, fence.Reason(err))
	}
	if lease, token := stored(t, db, "orders"); ran || lease != "" || token != 0 {
		t.Fatalf("after the refusal: writes ran %v, stored lease %q token %d; want nothing", ran, lease, token)
	}
	if _, err := f.Write(ctx, "", "orders", s.proof("orders", 1), spy); err == nil || ran {
		t.Fatalf("an empty lease: %v, writes ran %v; want an error and nothing run", err, ran)
	}
	if _, err := f.Write(ctx, "orders", "orders", s.proof("orders", 1), insertItem(ctx, "leader")); err != nil {
		t.Fatalf("the real leader: %v", err)
	}
	if _, err := f.Write(ctx, "orders", "orders", s.proof("scratch.tmp", 99), spy); !errors.Is(err, fence.ErrOtherLease) {
		t.Fatalf("another lease's proof for a written resource: %v, want other_lease", err)
	}
	if lease, token := stored(t, db, "orders"); ran || lease != "orders" || token != 1 {
		t.Fatalf("writes ran %v, stored lease %q token %d; want lease orders token 1", ran, lease, token)
	}
	// A row another lease's proof stored before this check existed keeps
	// refusing: tokens of two leases do not compare.
	if _, err := db.Exec(ctx, `INSERT INTO leasesvc_fence (resource, lease, fencing_token) VALUES ('billing', 'scratch.tmp', 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(ctx, "billing", "billing", s.proof("billing", 9), spy); !errors.Is(err, fence.ErrOtherLease) {
		t.Fatalf("a resource whose row is another lease's: %v, want other_lease", err)
	}
	if lease, token := stored(t, db, "billing"); ran || lease != "scratch.tmp" || token != 5 {
		t.Fatalf("writes ran %v, stored lease %q token %d; want the row unchanged", ran, lease, token)
	}
	if ids := items(t, db); len(ids) != 1 || ids[0] != "leader" {
		t.Fatalf("items %v, want [leader]", ids)
	}
}

// TestSuccessorFencesFirst: a Write with no writes advances the resource
// to the successor's token and writes nothing else, so the deposed
// holder's late write is refused before the successor's first own write.
func TestSuccessorFencesFirst(t *testing.T) {
	db := startDB(t, "")
	ctx := t.Context()
	s := newSigner(t)
	f, _ := pgfence.New(db, s.v, "")
	if _, err := f.Write(ctx, "orders", "orders", s.proof("orders", 1), insertItem(ctx, "first")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.FenceFirst(ctx, "orders", "orders", s.proof("orders", 2)); err != nil {
		t.Fatalf("the successor fencing first: %v", err)
	}
	if _, token := stored(t, db, "orders"); token != 2 {
		t.Fatalf("stored token %d, want 2", token)
	}
	if _, err := f.Write(ctx, "orders", "orders", s.proof("orders", 1), insertItem(ctx, "late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the deposed holder after the successor fenced: %v, want stale", err)
	}
	if ids := items(t, db); len(ids) != 1 || ids[0] != "first" {
		t.Fatalf("items %v, want [first]", ids)
	}
}
