package proofkey_test

import (
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/internal/proofkey"
	"github.com/leasesvc/leasesvc/lease"
)

// TestPrune: on the backend's (fake) clock, a key record is removed from
// the backend once it ended the retention ago, not a millisecond before,
// by whichever instance prunes first; it leaves a tombstone without the
// key, and no instance lists the key again. An instance's own record is
// never removed, even when its renewals stopped.
func TestPrune(t *testing.T) {
	clock := memory.NewManualClock(time.Unix(1_800_000_000, 0))
	store := memory.New(memory.WithClock(clock.Now))
	cfg := proofkey.Config{Retention: time.Hour, TTL: time.Minute}
	old := publish(t, store, "old", cfg)
	if err := old.Close(t.Context()); err != nil { // ends now: retention from here
		t.Fatal(err)
	}
	a, b := publish(t, store, "a", cfg), publish(t, store, "b", cfg) // never renewed: end in 1 min
	prune := func(via *proofkey.Issuer) int {
		t.Helper()
		n, err := via.Prune(t.Context())
		if err != nil {
			t.Fatalf("Prune: %v", err)
		}
		return n
	}
	listed := func() fence.StaticKeys {
		t.Helper()
		doc, err := a.JWKS(t.Context(), "unknown") // an unknown kid rereads the backend
		if err != nil {
			t.Fatal(err)
		}
		keys, err := fence.ParseJWKS(doc)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	record := func(kid string) *lease.Record {
		t.Helper()
		snap, err := store.Get(t.Context(), lease.KeyRecordPrefix+kid)
		if err != nil || snap.Row == nil {
			t.Fatalf("key record %s: %v", kid, err)
		}
		r, err := lease.DecodeRow(*snap.Row)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	clock.Advance(time.Hour - time.Millisecond)
	if n := prune(a); n != 0 || len(listed()) != 3 {
		t.Fatalf("within the retention: removed %d, %d keys listed; want 0 removed and 3 listed", n, len(listed()))
	}
	clock.Advance(time.Millisecond)
	if n := prune(a) + prune(b); n != 1 {
		t.Fatalf("at the retention: removed %d, want the old instance's record once", n)
	}
	if r := record(old.Kid()); !lease.Tombstone(r) || r.Metadata != nil || r.Holder != "" {
		t.Fatalf("the removed record %+v: want a tombstone without its key", r)
	}
	if keys := listed(); len(keys) != 2 || keys[old.Kid()] != nil {
		t.Fatalf("listed %v after the prune, want a and b only", keys)
	}

	// a and b ended at 1 min (no renewals, as if both had crashed); 1 h
	// later each removes the other's record, never its own.
	clock.Advance(time.Minute)
	if n := prune(a); n != 1 || lease.Tombstone(record(a.Kid())) || !lease.Tombstone(record(b.Kid())) {
		t.Fatalf("a pruned %d: a's own record tombstoned %v, b's %v; want b's only",
			n, lease.Tombstone(record(a.Kid())), lease.Tombstone(record(b.Kid())))
	}
	if n := prune(b); n != 1 || !lease.Tombstone(record(a.Kid())) {
		t.Fatalf("b pruned %d, a's record a tombstone %v: want a's record removed", n, lease.Tombstone(record(a.Kid())))
	}
	if n := prune(b); n != 0 {
		t.Fatalf("pruned %d again, want 0: nothing is left past the retention", n)
	}
}
