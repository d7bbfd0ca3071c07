package spannerfence_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/grpc/codes"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/spannerfence"
)

func TestMain(m *testing.M) { os.Exit(emulators.Main(m)) }

func id(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// scratchDB creates an emulator instance and a database with ddl, for
// this test only.
func scratchDB(t *testing.T, ddl ...string) *spanner.Client {
	t.Helper()
	emulators.Spanner(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ia, err := instance.NewInstanceAdminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ia.Close()
	project := "projects/" + emulators.Project()
	inst := id("fence-")
	op, err := ia.CreateInstance(ctx, &instancepb.CreateInstanceRequest{Parent: project, InstanceId: inst,
		Instance: &instancepb.Instance{Config: project + "/instanceConfigs/emulator-config", DisplayName: "fence tests", NodeCount: 1}})
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("create instance: %v", err)
	}
	da, err := database.NewDatabaseAdminClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer da.Close()
	db := id("fence_")
	dop, err := da.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{Parent: project + "/instances/" + inst,
		CreateStatement: "CREATE DATABASE `" + db + "`", ExtraStatements: ddl})
	if err == nil {
		_, err = dop.Wait(ctx)
	}
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	c, err := spanner.NewClient(context.Background(), project+"/instances/"+inst+"/databases/"+db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestDeposedLeaderRefused, on the Spanner emulator: after the next leader
// (token 2) wrote, the deposed leader's late write (token 1) is refused
// and nothing of its transaction applied; a forged proof and a failing
// transaction change nothing either.
func TestDeposedLeaderRefused(t *testing.T) {
	c := scratchDB(t, spannerfence.Schema(""), `CREATE TABLE Items (Id STRING(MAX) NOT NULL) PRIMARY KEY (Id)`)
	ctx := t.Context()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	kid := fence.KeyID(pub)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	v, _ := fence.NewVerifier(fence.StaticKeys{kid: pub}, "leasesvc")
	f, err := spannerfence.New(c, v, "")
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
	put := func(id string) func(context.Context, *spanner.ReadWriteTransaction) error {
		return func(_ context.Context, tx *spanner.ReadWriteTransaction) error {
			return tx.BufferWrite([]*spanner.Mutation{spanner.Insert("Items", []string{"Id"}, []any{id})})
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
	if _, err := f.Write(ctx, "leader", "orders", proof(priv, 3), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		if err := put("partial")(ctx, tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failing transaction: %v, want boom", err)
	}
	for _, id := range []string{"late", "forged", "partial"} {
		if _, err := c.Single().ReadRow(ctx, "Items", spanner.Key{id}, []string{"Id"}); spanner.ErrCode(err) != codes.NotFound {
			t.Errorf("row %q of a refused or failed transaction: %v, want NotFound", id, err)
		}
	}
	row, err := c.Single().ReadRow(ctx, spannerfence.DefaultTable, spanner.Key{"orders"}, []string{"FencingToken"})
	var token int64
	if err == nil {
		err = row.Columns(&token)
	}
	if err != nil || token != 2 {
		t.Fatalf("stored token %d, %v; want 2", token, err)
	}
}
