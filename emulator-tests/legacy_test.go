package emulatortests

import (
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// legacyRevocation checks a store over a lease that an older version
// wrote, revoked, with the revocation in columns (fields) of their own and
// a succession value of {"priority":2}: it reads back revoked; a write that
// keeps the revocation stores it in the encoded value alone; a new holding
// reads back not revoked. stored reads the old columns and the value as
// they are stored.
func legacyRevocation(t *testing.T, s backend.Store, name string, stored func() (revokedBy, revokeReason, value string)) {
	t.Helper()
	got, err := lease.GetWith(t.Context(), s.Get, name)
	if r := got.Record; err != nil || r == nil || r.RevokedBy != "op" || r.RevokeReason != "stuck" || r.Priority != 2 {
		t.Fatalf("the older record reads back as %+v, %v; want revoked by op, priority 2", r, err)
	}
	loop := backend.NewLoop(s)
	update := func(change func(*lease.Record)) {
		t.Helper()
		if _, err := lease.UpdateWith(t.Context(), loop.Update, name, func(cur lease.Snapshot) (*lease.Record, error) {
			next := *cur.Record
			change(&next)
			return &next, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(r *lease.Record) { r.Priority = 3 })
	if by, reason, value := stored(); by != "" || reason != "" || !strings.Contains(value, `"revokedBy":"op","revokeReason":"stuck"`) {
		t.Fatalf("the record rewritten holds %q, %q, %q; want the revocation in the encoded value alone", by, reason, value)
	}
	if got, err := lease.GetWith(t.Context(), s.Get, name); err != nil || got.Record.RevokeReason != "stuck" || got.Record.Priority != 3 {
		t.Fatalf("the rewritten record reads back as %+v, %v", got.Record, err)
	}
	update(func(r *lease.Record) { r.Holder, r.FencingToken, r.RevokedBy, r.RevokeReason = "h2", 4, "", "" })
	if by, reason, value := stored(); by != "" || reason != "" || strings.Contains(value, "revoke") {
		t.Fatalf("the record of a new holding holds %q, %q, %q; want no revocation", by, reason, value)
	}
	if got, err := lease.GetWith(t.Context(), s.Get, name); err != nil || got.Record.RevokeReason != "" || got.Record.RevokedBy != "" || got.Record.Holder != "h2" {
		t.Fatalf("the new holding reads back as %+v, %v; want it not revoked", got.Record, err)
	}
}

// TestSpannerLegacyRevocationColumns: a row with RevokedBy and
// RevokeReason set, as versions before the encoded value held the
// revocation wrote it, reads back revoked, and is rewritten without them.
func TestSpannerLegacyRevocationColumns(t *testing.T) {
	_, client := spannerSetup(t)
	s := spannerStore(t)
	name := spannerID("legacy.")
	at := time.Now().Add(-time.Minute)
	_, err := client.Apply(t.Context(), []*spanner.Mutation{spanner.Insert("Leases",
		[]string{"Name", "Holder", "FencingToken", "TtlMs", "AcquireTime", "RenewTime", "ExpireTime", "Transitions", "UpdateTime", "Principal", "RevokedBy", "RevokeReason", "Succession"},
		[]any{name, "h", int64(3), int64(1000), at, at, at, int64(3), spanner.CommitTimestamp, "p", "op", "stuck", `{"priority":2}`})})
	if err != nil {
		t.Fatal(err)
	}
	legacyRevocation(t, s, name, func() (by, reason, value string) {
		row, err := client.Single().ReadRow(t.Context(), "Leases", spanner.Key{name}, []string{"RevokedBy", "RevokeReason", "Succession"})
		if err != nil {
			t.Fatal(err)
		}
		var b, r, v spanner.NullString
		if err := row.Columns(&b, &r, &v); err != nil {
			t.Fatal(err)
		}
		if b.Valid && b.StringVal == "" || r.Valid && r.StringVal == "" {
			t.Fatalf("revocation columns %v, %v: want NULL, not empty", b, r)
		}
		return b.StringVal, r.StringVal, v.StringVal
	})
}

// TestFirestoreLegacyRevocationFields: a document with revokedBy and
// revokeReason, as versions before the encoded value held the revocation
// wrote it, reads back revoked, and is rewritten without them.
func TestFirestoreLegacyRevocationFields(t *testing.T) {
	s, c, coll := firestoreStore(t)
	at := time.Now().Add(-time.Minute).UTC()
	ref := c.Collection(coll).Doc("old")
	_, err := ref.Create(t.Context(), map[string]any{"name": "old", "holder": "h", "fencingToken": 3, "ttlMs": 1000,
		"acquireTime": at, "renewTime": at, "expireTime": at, "transitions": 3, "metadata": "", "principal": "p",
		"revokedBy": "op", "revokeReason": "stuck", "succession": `{"priority":2}`})
	if err != nil {
		t.Fatal(err)
	}
	legacyRevocation(t, s, "old", func() (by, reason, value string) {
		ds, err := ref.Get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		data := ds.Data()
		for _, f := range []string{"revokedBy", "revokeReason"} {
			if _, ok := data[f]; ok {
				t.Fatalf("the document written still has %s: %v", f, data)
			}
		}
		value, _ = data["succession"].(string)
		return "", "", value
	})
}
