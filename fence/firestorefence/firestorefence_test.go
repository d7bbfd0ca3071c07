package firestorefence_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/firestorefence"
)

func TestMain(m *testing.M) { os.Exit(emulators.Main(m)) }

// TestDeposedLeaderRefused, on the Firestore emulator: after the next
// leader (token 2) wrote, the deposed leader's late write (token 1) is
// refused and nothing of its transaction applied; a forged proof and a
// failing transaction change nothing either.
func TestDeposedLeaderRefused(t *testing.T) {
	emulators.Firestore(t)
	ctx := t.Context()
	c, err := firestore.NewClientWithDatabase(ctx, emulators.Project(), firestore.DefaultDatabaseID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	items := c.Collection("items-" + suffix)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := fence.KeyID(pub)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	v, _ := fence.NewVerifier(fence.StaticKeys{kid: pub}, "leasesvc")
	f, err := firestorefence.New(c, v, "fence-"+suffix)
	if err != nil {
		t.Fatal(err)
	}
	proof := func(key ed25519.PrivateKey, token int64) string {
		p, err := fence.Sign(key, kid, fence.Claims{Lease: "leader", FencingToken: token, Holder: "w", IssuedAt: 1, Issuer: "leasesvc"})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	put := func(id string) func(context.Context, *firestore.Transaction) error {
		return func(_ context.Context, tx *firestore.Transaction) error {
			return tx.Create(items.Doc(id), map[string]any{"id": id})
		}
	}
	for i, id := range []string{"first", "second"} {
		if _, err := f.Write(ctx, "leader", "orders", proof(priv, int64(i+1)), put(id)); err != nil {
			t.Fatalf("leader %d: %v", i+1, err)
		}
	}
	if _, err := f.Write(ctx, "leader", "orders", proof(priv, 1), put("late")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the deposed leader's late write: %v, want ErrStale", err)
	}
	if _, err := f.Write(ctx, "leader", "orders", proof(stranger, 99), put("forged")); !errors.Is(err, fence.ErrSignature) {
		t.Fatalf("a forged token: %v, want ErrSignature", err)
	}
	boom := errors.New("boom")
	if _, err := f.Write(ctx, "leader", "orders", proof(priv, 3), func(ctx context.Context, tx *firestore.Transaction) error {
		if err := put("partial")(ctx, tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failing transaction: %v, want boom", err)
	}
	for _, id := range []string{"late", "forged", "partial"} {
		if _, err := items.Doc(id).Get(ctx); status.Code(err) != codes.NotFound {
			t.Errorf("document %q of a refused or failed transaction: %v, want NotFound", id, err)
		}
	}
	snap, err := c.Collection("fence-" + suffix).Doc("orders").Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Data()["fencingToken"]; got != int64(2) {
		t.Fatalf("stored token %v, want 2", got)
	}
}
