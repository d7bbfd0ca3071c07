package postgres_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/lease"
)

// olderTable is the table as versions before the succession state
// (docs/contract.md §8) created it.
const olderTable = `CREATE TABLE leasesvc_leases (
	name          text COLLATE "C" PRIMARY KEY,
	holder        text NOT NULL,
	fencing_token bigint NOT NULL,
	ttl_ms        bigint NOT NULL,
	acquire_time  timestamptz NOT NULL,
	renew_time    timestamptz NOT NULL,
	expire_time   timestamptz NOT NULL,
	transitions   bigint NOT NULL,
	metadata      text NOT NULL DEFAULT '',
	principal     text NOT NULL DEFAULT '',
	revoked_by    text NOT NULL DEFAULT '',
	revoke_reason text NOT NULL DEFAULT ''
);
CREATE INDEX leasesvc_leases_by_expiry ON leasesvc_leases (expire_time, name);
INSERT INTO leasesvc_leases VALUES ('old', 'h', 3, 1000, now(), now(), now() + interval '1 hour', 3, '{"a":1}', 'p', '', '')`

// TestOpenAddsColumnsToAnOlderTable: a table created by an older version
// without the succession column is refused at open without
// LEASESVC_POSTGRES_MIGRATE, and gains the column at open with it; its rows
// read back unchanged, without succession state, and the column then
// stores it.
func TestOpenAddsColumnsToAnOlderTable(t *testing.T) {
	url := pgtest.Start(t).URL
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(t.Context(), olderTable); err != nil {
		t.Fatal(err)
	}
	o, ok := backend.Lookup("postgres")
	if !ok {
		t.Fatal("postgres is not registered")
	}
	open := func(migrate string) (backend.Store, error) {
		env := map[string]string{"LEASESVC_POSTGRES_URL": url, "LEASESVC_POSTGRES_MIGRATE": migrate}
		opened, err := o.Open(t.Context(), func(k string) string { return env[k] }, backend.OpenOptions{})
		if err == nil {
			t.Cleanup(func() { _ = opened.Close() })
		}
		return opened.Store, err
	}
	if _, err := open("false"); err == nil || !strings.Contains(err.Error(), "succession") || !strings.Contains(err.Error(), "LEASESVC_POSTGRES_MIGRATE=true") {
		t.Fatalf("open of the older table without migrating = %v, want an error naming the missing column and the remedy", err)
	}
	for i := range 2 { // the second open finds the column and changes nothing
		if _, err := open("true"); err != nil {
			t.Fatalf("open #%d of the older table with LEASESVC_POSTGRES_MIGRATE=true: %v", i+1, err)
		}
	}
	s, err := open("false")
	if err != nil {
		t.Fatalf("open after the migration, without migrating: %v", err)
	}
	got, err := lease.GetWith(t.Context(), s.Get, "old")
	if r := got.Record; err != nil || r == nil || r.FencingToken != 3 || string(r.Metadata) != `{"a":1}` || r.Principal != "p" {
		t.Fatalf("the older row after the migration = %+v, %v; want it unchanged", r, err)
	}
	if r := got.Record; r.Priority != 0 || r.Checkpoint != nil || r.CheckpointToken != 0 || r.Candidates != nil || r.ReservedFor != "" || !r.ReservedUntil.IsZero() {
		t.Fatalf("the older row has succession state %+v", r)
	}
	until := got.ServerTime.Add(time.Minute).Truncate(time.Microsecond)
	_, err = lease.UpdateWith(t.Context(), backend.NewLoop(s).Update, "old", func(cur lease.Snapshot) (*lease.Record, error) {
		next := *cur.Record
		next.Priority, next.Checkpoint, next.CheckpointToken = 5, []byte(`{"at":7}`), 3
		next.Candidates = []lease.Candidate{{ID: "w", Holder: "x", Since: cur.ServerTime, Until: until}}
		return &next, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err = lease.GetWith(t.Context(), s.Get, "old")
	if r := got.Record; err != nil || r.Priority != 5 || string(r.Checkpoint) != `{"at":7}` || len(r.Candidates) != 1 || !r.Candidates[0].Until.Equal(until) {
		t.Fatalf("succession state in the migrated table read back as %+v, %v", r, err)
	}
}
