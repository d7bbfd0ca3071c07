package emulatortests

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	gfs "cloud.google.com/go/firestore"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/backendtest"
	"github.com/leasesvc/leasesvc/backend/firestore"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/lease"
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

// TestFirestoreScanExpiry checks ScanExpiry against the memory backend's
// answer over the same records: order by (expireTime, name), the cursor,
// the until bound and the limit.
func TestFirestoreScanExpiry(t *testing.T) {
	t.Parallel()
	fs, _, _ := firestoreStore(t)
	mem := memory.New()
	base := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	var recs []lease.Record
	for i, off := range []int{5, 1, 3, 3, 3, 9, 0, 7, 1, 12} {
		exp := base.Add(time.Duration(off) * time.Second)
		recs = append(recs, lease.Record{
			Name: fmt.Sprintf("scan-%02d", (i*7)%10), Holder: "h", FencingToken: int64(i + 1), TTL: time.Second,
			AcquireTime: exp.Add(-time.Second), RenewTime: exp.Add(-time.Second), ExpireTime: exp, Transitions: 1,
		})
	}
	for _, s := range []backend.Store{fs, mem} {
		for _, r := range recs {
			if _, err := lease.UpdateWith(t.Context(), backend.NewLoop(s).Update, r.Name, func(lease.Snapshot) (*lease.Record, error) { return &r, nil }); err != nil {
				t.Fatalf("Update(%s): %v", r.Name, err)
			}
		}
	}
	cases := []struct {
		after backend.Cursor
		until time.Time
		limit int
	}{
		{backend.Cursor{}, base.Add(time.Hour), 100},
		{backend.Cursor{}, base.Add(3 * time.Second), 100},
		{backend.Cursor{}, base.Add(3*time.Second - time.Microsecond), 100},
		{backend.Cursor{}, base.Add(time.Hour), 3},
		{backend.Cursor{ExpireTime: base.Add(3 * time.Second)}, base.Add(time.Hour), 100},
		{backend.Cursor{ExpireTime: base.Add(3 * time.Second), Name: recs[3].Name}, base.Add(time.Hour), 100},
		{backend.Cursor{ExpireTime: base.Add(3 * time.Second), Name: recs[3].Name}, base.Add(7 * time.Second), 2},
		{backend.Cursor{ExpireTime: base.Add(time.Hour)}, base.Add(2 * time.Hour), 100},
	}
	names := func(rs []backend.Row) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name+"@"+r.ExpireTime.Sub(base).String())
		}
		return strings.Join(out, " ")
	}
	for _, c := range cases {
		got, err := fs.ScanExpiry(t.Context(), c.after, c.until, c.limit)
		if err != nil {
			t.Fatalf("ScanExpiry(%+v, %v, %d): %v", c.after, c.until, c.limit, err)
		}
		want, err := mem.ScanExpiry(t.Context(), c.after, c.until, c.limit)
		if err != nil {
			t.Fatalf("memory ScanExpiry: %v", err)
		}
		if names(got) != names(want) {
			t.Errorf("ScanExpiry(after %v/%q, until +%v, limit %d)\n got  %s\n want %s",
				c.after.ExpireTime.Sub(base), c.after.Name, c.until.Sub(base), c.limit, names(got), names(want))
		}
	}
}
