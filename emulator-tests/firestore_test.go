package emulatortests

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	gfs "cloud.google.com/go/firestore"

	"github.com/leasesvc/leasesvc/backend/backendtest"
	"github.com/leasesvc/leasesvc/backend/firestore"
	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
)

// firestoreClient returns a client of the Firestore emulator, closed when
// the test ends.
func firestoreClient(t testing.TB) *gfs.Client {
	t.Helper()
	emulators.Firestore(t)
	c, err := gfs.NewClientWithDatabase(t.Context(), emulators.Project(), gfs.DefaultDatabaseID)
	if err != nil {
		t.Fatalf("firestore.NewClientWithDatabase: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close Firestore client: %v", err)
		}
	})
	return c
}

// uniqueCollection returns a collection name no other test run uses.
func uniqueCollection(label string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return label + "-" + hex.EncodeToString(b[:])
}

// firestoreStore returns a Store over a fresh collection of the emulator.
func firestoreStore(t testing.TB) (*firestore.Store, *gfs.Client, string) {
	t.Helper()
	c := firestoreClient(t)
	coll := uniqueCollection("leases")
	s, err := firestore.New(c, firestore.WithCollection(coll))
	if err != nil {
		t.Fatalf("firestore.New: %v", err)
	}
	return s, c, coll
}

// TestFirestoreConformance runs the backend conformance suite over the
// Firestore emulator, on the emulator's real clock.
func TestFirestoreConformance(t *testing.T) {
	s, _, _ := firestoreStore(t)
	backendtest.Run(t, func(t *testing.T) backendtest.Harness {
		return backendtest.Harness{Store: s}
	}, backendtest.Options{})
}
