package spannerfence_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"testing"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/spannerfence"
)

// scratch is a Fence over a database of this test only, on the Spanner
// emulator, with a signer its Verifier trusts.
type scratch struct {
	t    *testing.T
	c    *spanner.Client
	f    *spannerfence.Fence
	priv ed25519.PrivateKey
	kid  string
}

func newScratch(t *testing.T) scratch {
	t.Helper()
	c := scratchDB(t, spannerfence.Schema(""), `CREATE TABLE Items (Id STRING(MAX) NOT NULL) PRIMARY KEY (Id)`)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := fence.KeyID(pub)
	v, _ := fence.NewVerifier(fence.StaticKeys{kid: pub}, "leasesvc")
	f, err := spannerfence.New(c, v, "")
	if err != nil {
		t.Fatal(err)
	}
	return scratch{t, c, f, priv, kid}
}

func (s scratch) proof(lease string, token int64) string {
	p, err := fence.Sign(s.priv, s.kid, fence.Claims{Lease: lease, FencingToken: token, Holder: "w", IssuedAt: 1, Issuer: "leasesvc"})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

func put(id string) func(context.Context, *spanner.ReadWriteTransaction) error {
	return func(_ context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{spanner.Insert("Items", []string{"Id"}, []any{id})})
	}
}

// stored returns the lease and token stored for resource; "" and 0 if none.
func (s scratch) stored(resource string) (string, int64) {
	s.t.Helper()
	row, err := s.c.Single().ReadRow(s.t.Context(), spannerfence.DefaultTable, spanner.Key{resource}, []string{"Lease", "FencingToken"})
	if spanner.ErrCode(err) == codes.NotFound {
		return "", 0
	}
	var lease string
	var token int64
	if err == nil {
		err = row.Columns(&lease, &token)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return lease, token
}

// exists reports whether the item row id was written.
func (s scratch) exists(id string) bool {
	s.t.Helper()
	_, err := s.c.Single().ReadRow(s.t.Context(), "Items", spanner.Key{id}, []string{"Id"})
	if err != nil && spanner.ErrCode(err) != codes.NotFound {
		s.t.Fatal(err)
	}
	return err == nil
}

// TestExpectedLease (§17 rule 4), on the Spanner emulator: a genuine proof
// for another lease than the one that fences the resource is refused,
// other_lease, and stores nothing, for a resource never written too:
// "orders" fenced by lease "orders" is not bound to "scratch.tmp" by a
// proof of that lease writing first, and the real leader then writes. An
// empty lease is refused; a row of another lease left from before refuses.
func TestExpectedLease(t *testing.T) {
	s := newScratch(t)
	ctx := t.Context()
	_, err := s.f.Write(ctx, "orders", "orders", s.proof("scratch.tmp", 99), put("scratch"))
	if !errors.Is(err, fence.ErrOtherLease) || fence.Reason(err) != "other_lease" {
		t.Fatalf("another lease's proof for a resource never written: %v (reason %q), want other_lease", err, fence.Reason(err))
	}
	if lease, token := s.stored("orders"); lease != "" || token != 0 || s.exists("scratch") {
		t.Fatalf("after the refusal: stored lease %q token %d, item written %v; want nothing", lease, token, s.exists("scratch"))
	}
	if _, err := s.f.Write(ctx, "", "orders", s.proof("orders", 1), put("empty")); err == nil || s.exists("empty") {
		t.Fatalf("an empty lease: %v; want an error and nothing written", err)
	}
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("orders", 1), put("leader")); err != nil {
		t.Fatalf("the real leader: %v", err)
	}
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("scratch.tmp", 99), put("scratch")); !errors.Is(err, fence.ErrOtherLease) {
		t.Fatalf("another lease's proof for a written resource: %v, want other_lease", err)
	}
	if lease, token := s.stored("orders"); lease != "orders" || token != 1 || !s.exists("leader") || s.exists("scratch") {
		t.Fatalf("stored lease %q token %d; want lease orders token 1, the leader's item only", lease, token)
	}
	if _, err := s.c.Apply(ctx, []*spanner.Mutation{spanner.Insert(spannerfence.DefaultTable,
		[]string{"Resource", "Lease", "FencingToken", "UpdateTime"}, []any{"billing", "scratch.tmp", int64(5), spanner.CommitTimestamp})}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.f.Write(ctx, "billing", "billing", s.proof("billing", 9), put("billing")); !errors.Is(err, fence.ErrOtherLease) {
		t.Fatalf("a resource whose row is another lease's: %v, want other_lease", err)
	}
	if lease, token := s.stored("billing"); lease != "scratch.tmp" || token != 5 || s.exists("billing") {
		t.Fatalf("stored lease %q token %d; want the row unchanged and nothing written", lease, token)
	}
}

// TestSuccessorFencesFirst, on the Spanner emulator: a Write with no
// writes advances the resource to the successor's token and writes
// nothing else, so the deposed holder's late write is refused before the
// successor's first own write.
func TestSuccessorFencesFirst(t *testing.T) {
	s := newScratch(t)
	ctx := t.Context()
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("orders", 1), put("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.f.FenceFirst(ctx, "orders", "orders", s.proof("orders", 2)); err != nil {
		t.Fatalf("the successor fencing first: %v", err)
	}
	if _, token := s.stored("orders"); token != 2 {
		t.Fatalf("stored token %d, want 2", token)
	}
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("orders", 1), put("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the deposed holder after the successor fenced: %v, want stale", err)
	}
	if !s.exists("first") || s.exists("late") {
		t.Fatal("want the first item only")
	}
}
