package spanner

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/leasesvc/leasesvc/backend"
)

func TestPrefixEnd(t *testing.T) {
	cases := []struct {
		prefix, end string
		ok          bool
	}{
		{"a", "b", true},
		{"team-a.", "team-a/", true},
		{"az", "a{", true},
		{"a\x7f", "b", true},
		{"aé", "b", true},
		{"\x7f", "", false},
		{"", "", false},
	}
	for _, c := range cases {
		end, ok := prefixEnd(c.prefix)
		if end != c.end || ok != c.ok {
			t.Errorf("prefixEnd(%q) = %q, %t; want %q, %t", c.prefix, end, ok, c.end, c.ok)
		}
		if ok && !(c.prefix < end && strings.HasPrefix(c.prefix+"\x7f\x7f", c.prefix) && c.prefix+"\x7f\x7f" < end) {
			t.Errorf("prefixEnd(%q) = %q is not above every name with the prefix", c.prefix, end)
		}
	}
}

func TestListSQL(t *testing.T) {
	st := listSQL("team-a.", "team-a.x", 11)
	for _, s := range []string{"Name > @after", "Name >= @prefix", "STARTS_WITH(Name, @prefix)", "Name < @end", "ORDER BY Name LIMIT @limit"} {
		if !strings.Contains(st.SQL, s) {
			t.Errorf("listSQL does not contain %q: %s", s, st.SQL)
		}
	}
	if st.Params["end"] != "team-a/" || st.Params["limit"] != int64(11) || st.Params["after"] != "team-a.x" {
		t.Errorf("listSQL params = %v", st.Params)
	}
	if all := listSQL("", "", 5); strings.Contains(all.SQL, "@prefix") {
		t.Errorf("listSQL without a prefix filters on it: %s", all.SQL)
	}
}

func TestWriteMutation(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	next := &backend.Record{Name: "ignored", Holder: "h", FencingToken: 3, TTL: 1500 * time.Millisecond,
		AcquireTime: now, RenewTime: now, ExpireTime: now.Add(1500 * time.Millisecond), Transitions: 2, Metadata: []byte(`{"b":1,"a":2}`)}
	m, rec, err := writeMutation("lease", next)
	if err != nil || m == nil {
		t.Fatalf("writeMutation = %v, %v", m, err)
	}
	if rec.Name != "lease" || string(rec.Metadata) != `{"b":1,"a":2}` || next.Name != "ignored" {
		t.Fatalf("written record %+v (input %+v)", rec, next)
	}
	rec.Metadata[0] = 'x'
	if next.Metadata[0] != '{' {
		t.Fatal("written record shares metadata with decide's record")
	}
	empty := *next
	empty.Metadata = []byte{}
	if _, rec, _ := writeMutation("lease", &empty); rec.Metadata != nil {
		t.Fatalf("empty metadata reads back as %q, want nil (NULL)", rec.Metadata)
	}
	if m, rec, _ := writeMutation("lease", next); rec.Candidates != nil || rec.Checkpoint != nil || !strings.Contains(fmt.Sprint(m), "Succession") {
		t.Fatalf("a record without succession state writes %v, reads back as %+v", m, rec)
	}
	succ := *next
	succ.Priority, succ.Checkpoint, succ.CheckpointToken = 4, []byte(`{"b":1}`), 2
	succ.Candidates = []backend.Candidate{{ID: "w", Holder: "x", Since: now, Until: now.Add(time.Second)}}
	succ.ReservedFor, succ.ReservedUntil = "x", now.In(time.FixedZone("y", 3600))
	_, rec, err = writeMutation("lease", &succ)
	if err != nil || rec.Priority != 4 || string(rec.Checkpoint) != `{"b":1}` || len(rec.Candidates) != 1 || rec.ReservedUntil.Location() != time.UTC || !rec.ReservedUntil.Equal(now) {
		t.Fatalf("writeMutation of succession state = %+v, %v", rec, err)
	}
	rec.Checkpoint[1], rec.Candidates[0].ID = 'X', "z"
	if string(succ.Checkpoint) != `{"b":1}` || succ.Candidates[0].ID != "w" {
		t.Fatal("written record shares the checkpoint or candidates with decide's record")
	}
	bad := *next
	bad.Checkpoint = []byte(`{"b":`)
	if _, _, err := writeMutation("lease", &bad); err == nil {
		t.Fatal("writeMutation accepted a checkpoint that is not JSON")
	}
	bad = *next
	bad.TTL = 1500 * time.Microsecond
	if _, _, err := writeMutation("lease", &bad); err == nil {
		t.Fatal("writeMutation accepted a TTL the TtlMs column cannot hold")
	}
	bad = *next
	bad.Metadata = []byte{'"', 0xff, '"'}
	if _, _, err := writeMutation("lease", &bad); err == nil {
		t.Fatal("writeMutation accepted metadata that is not UTF-8")
	}
}

// TestLegacyRevocationColumns: a row that an older version wrote, with the
// revocation in the RevokedBy and RevokeReason columns and not in
// Succession, reads back revoked; a write stores the revocation in
// Succession alone and NULL in those columns, so that a later holding of a
// row that held them does not read back revoked.
func TestLegacyRevocationColumns(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	str := func(s string) spanner.NullString { return spanner.NullString{StringVal: s, Valid: true} }
	old := leaseRow{Name: "n", Holder: "h", FencingToken: 3, TtlMs: 1000, AcquireTime: now, RenewTime: now, ExpireTime: now,
		Transitions: 3, Principal: str("p"), RevokedBy: str("op"), RevokeReason: str("stuck"), Succession: str(`{"priority":2}`)}
	rec, err := old.record()
	if err != nil || rec.RevokedBy != "op" || rec.RevokeReason != "stuck" || rec.Priority != 2 || rec.Principal != "p" {
		t.Fatalf("the older row reads back as %+v, %v; want revoked by op, priority 2", rec, err)
	}
	_, written, err := writeMutation("n", rec)
	if err != nil || written.RevokeReason != "stuck" || written.RevokedBy != "op" {
		t.Fatalf("writeMutation of the revoked record = %+v, %v", written, err)
	}
	row, err := backend.EncodeRow(rec)
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string]any{}
	for i, v := range writeValues(row) {
		cols[writeColumns[i]] = v
	}
	null := spanner.NullString{}
	if cols["RevokedBy"] != null || cols["RevokeReason"] != null || !strings.Contains(cols["Succession"].(spanner.NullString).StringVal, `"revokeReason":"stuck"`) {
		t.Fatalf("the row written holds %v; want NULL revocation columns and the revocation in Succession", cols)
	}
}
