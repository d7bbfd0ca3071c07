package postgres_test

import (
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/lease"
)

// TestLegacyRevocationColumns: a row that an older version wrote, with the
// revocation in revoked_by and revoke_reason and not in the succession
// column, reads back revoked; a write stores the revocation in the
// succession column alone and empties those columns, so that a later
// holding does not read back revoked.
func TestLegacyRevocationColumns(t *testing.T) {
	pool := migrated(t)
	s := postgres.New(pool)
	if _, err := pool.Exec(t.Context(), `INSERT INTO leasesvc_leases VALUES ('old', 'h', 3, 1000, now() - interval '1 minute', now() - interval '1 minute', now() - interval '1 second', 3, '', 'p', 'op', 'stuck', '{"priority":2}')`); err != nil {
		t.Fatal(err)
	}
	stored := func() (revokedBy, revokeReason, value string) {
		t.Helper()
		if err := pool.QueryRow(t.Context(), "SELECT revoked_by, revoke_reason, succession FROM leasesvc_leases WHERE name = 'old'").Scan(&revokedBy, &revokeReason, &value); err != nil {
			t.Fatal(err)
		}
		return revokedBy, revokeReason, value
	}
	got, err := lease.GetWith(t.Context(), s.Get, "old")
	if r := got.Record; err != nil || r == nil || r.RevokedBy != "op" || r.RevokeReason != "stuck" || r.Priority != 2 {
		t.Fatalf("the older row reads back as %+v, %v; want revoked by op, priority 2", r, err)
	}
	loop := backend.NewLoop(s)
	update := func(change func(*lease.Record)) {
		t.Helper()
		if _, err := lease.UpdateWith(t.Context(), loop.Update, "old", func(cur lease.Snapshot) (*lease.Record, error) {
			next := *cur.Record
			change(&next)
			return &next, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(r *lease.Record) { r.Priority = 3 }) // keeps the revocation
	if by, reason, value := stored(); by != "" || reason != "" || !strings.Contains(value, `"revokedBy":"op","revokeReason":"stuck"`) {
		t.Fatalf("the row rewritten holds %q, %q, %q; want the revocation in the succession column alone", by, reason, value)
	}
	if got, err := lease.GetWith(t.Context(), s.Get, "old"); err != nil || got.Record.RevokeReason != "stuck" || got.Record.Priority != 3 {
		t.Fatalf("the rewritten row reads back as %+v, %v", got.Record, err)
	}
	if _, err := pool.Exec(t.Context(), `UPDATE leasesvc_leases SET revoked_by = 'op', revoke_reason = 'stuck', succession = '' WHERE name = 'old'`); err != nil {
		t.Fatal(err)
	}
	update(func(r *lease.Record) { r.Holder, r.FencingToken, r.RevokedBy, r.RevokeReason = "h2", 4, "", "" }) // a new holding
	if by, reason, value := stored(); by != "" || reason != "" || value != "" {
		t.Fatalf("the row of a new holding holds %q, %q, %q; want nothing", by, reason, value)
	}
	if got, err := lease.GetWith(t.Context(), s.Get, "old"); err != nil || got.Record.RevokeReason != "" || got.Record.RevokedBy != "" || got.Record.Holder != "h2" {
		t.Fatalf("the new holding reads back as %+v, %v; want it not revoked", got.Record, err)
	}
}
