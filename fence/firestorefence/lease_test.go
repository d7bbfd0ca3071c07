package firestorefence_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/firestorefence"
)

// scratch is a Fence over collections of this test only, on the Firestore
// emulator, with a signer its Verifier trusts.
type scratch struct {
	t      *testing.T
	c      *firestore.Client
	f      *firestorefence.Fence
	tokens *firestore.CollectionRef
	items  *firestore.CollectionRef
	priv   ed25519.PrivateKey
	kid    string
}

func newScratch(t *testing.T) scratch {
	t.Helper()
	emulators.Firestore(t)
	c, err := firestore.NewClientWithDatabase(t.Context(), emulators.Project(), firestore.DefaultDatabaseID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := fence.KeyID(pub)
	v, _ := fence.NewVerifier(fence.StaticKeys{kid: pub}, "leasesvc")
	f, err := firestorefence.New(c, v, "fence-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	return scratch{t, c, f, c.Collection("fence-" + suffix), c.Collection("items-" + suffix), priv, kid}
}

func (s scratch) proof(lease string, token int64) string {
	p, err := fence.Sign(s.priv, s.kid, fence.Claims{Lease: lease, FencingToken: token, Holder: "w", IssuedAt: 1, Issuer: "leasesvc"})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s scratch) put(id string) func(context.Context, *firestore.Transaction) error {
	return func(_ context.Context, tx *firestore.Transaction) error {
		return tx.Create(s.items.Doc(id), map[string]any{"id": id})
	}
}

// stored returns the lease and token stored for resource; "" and 0 if none.
func (s scratch) stored(resource string) (string, int64) {
	s.t.Helper()
	snap, err := s.tokens.Doc(resource).Get(s.t.Context())
	if status.Code(err) == codes.NotFound {
		return "", 0
	}
	if err != nil {
		s.t.Fatal(err)
	}
	lease, _ := snap.Data()["lease"].(string)
	token, _ := snap.Data()["fencingToken"].(int64)
	return lease, token
}

// exists reports whether the item document id was written.
func (s scratch) exists(id string) bool {
	s.t.Helper()
	_, err := s.items.Doc(id).Get(s.t.Context())
	if err != nil && status.Code(err) != codes.NotFound {
		s.t.Fatal(err)
	}
	return err == nil
}

// TestExpectedLease (§17 rule 4), on the Firestore emulator: a genuine
// proof for another lease than the one that fences the resource is
// refused, other_lease, and stores nothing, for a resource never written
// too: "orders" fenced by lease "orders" is not bound to "scratch.tmp" by
// a proof of that lease writing first, and the real leader then writes.
// An empty lease is refused; a document of another lease left from before
// refuses.
func TestExpectedLease(t *testing.T) {
	s := newScratch(t)
	ctx := t.Context()
	_, err := s.f.Write(ctx, "orders", "orders", s.proof("scratch.tmp", 99), s.put("scratch"))
	if !errors.Is(err, fence.ErrOtherLease) || fence.Reason(err) != "other_lease" {
		t.Fatalf("another lease's proof for a resource never written: %v (reason %q), want other_lease", err, fence.Reason(err))
	}
	if lease, token := s.stored("orders"); lease != "" || token != 0 || s.exists("scratch") {
		t.Fatalf("after the refusal: stored lease %q token %d, item written %v; want nothing", lease, token, s.exists("scratch"))
	}
	if _, err := s.f.Write(ctx, "", "orders", s.proof("orders", 1), s.put("empty")); err == nil || s.exists("empty") {
		t.Fatalf("an empty lease: %v; want an error and nothing written", err)
	}
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("orders", 1), s.put("leader")); err != nil {
		t.Fatalf("the real leader: %v", err)
	}
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("scratch.tmp", 99), s.put("scratch")); !errors.Is(err, fence.ErrOtherLease) {
		t.Fatalf("another lease's proof for a written resource: %v, want other_lease", err)
	}
	if lease, token := s.stored("orders"); lease != "orders" || token != 1 || !s.exists("leader") || s.exists("scratch") {
		t.Fatalf("stored lease %q token %d; want lease orders token 1, the leader's item only", lease, token)
	}
	if _, err := s.tokens.Doc("billing").Set(ctx, map[string]any{"lease": "scratch.tmp", "fencingToken": int64(5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.f.Write(ctx, "billing", "billing", s.proof("billing", 9), s.put("billing")); !errors.Is(err, fence.ErrOtherLease) {
		t.Fatalf("a resource whose document is another lease's: %v, want other_lease", err)
	}
	if lease, token := s.stored("billing"); lease != "scratch.tmp" || token != 5 || s.exists("billing") {
		t.Fatalf("stored lease %q token %d; want the document unchanged and nothing written", lease, token)
	}
}

// TestSuccessorFencesFirst, on the Firestore emulator: a Write with no
// writes advances the resource to the successor's token and writes
// nothing else, so the deposed holder's late write is refused before the
// successor's first own write.
func TestSuccessorFencesFirst(t *testing.T) {
	s := newScratch(t)
	ctx := t.Context()
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("orders", 1), s.put("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.f.FenceFirst(ctx, "orders", "orders", s.proof("orders", 2)); err != nil {
		t.Fatalf("the successor fencing first: %v", err)
	}
	if _, token := s.stored("orders"); token != 2 {
		t.Fatalf("stored token %d, want 2", token)
	}
	if _, err := s.f.Write(ctx, "orders", "orders", s.proof("orders", 1), s.put("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the deposed holder after the successor fenced: %v, want stale", err)
	}
	if !s.exists("first") || s.exists("late") {
		t.Fatal("want the first item only")
	}
}
