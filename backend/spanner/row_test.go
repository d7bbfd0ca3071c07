package spanner

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
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
	next := &backend.Row{Name: "ignored", Holder: "h", FencingToken: 3, TTL: 1500 * time.Millisecond,
		AcquireTime: now, RenewTime: now, ExpireTime: now.Add(1500 * time.Millisecond), Transitions: 2, Metadata: []byte(`{"b":1,"a":2}`)}
	m, row, err := writeMutation("lease", next)
	if err != nil || m == nil {
		t.Fatalf("writeMutation = %v, %v", m, err)
	}
	if row.Name != "lease" || string(row.Metadata) != `{"b":1,"a":2}` || next.Name != "ignored" {
		t.Fatalf("written row %+v (input %+v)", row, next)
	}
	row.Metadata[0] = 'x'
	if next.Metadata[0] != '{' {
		t.Fatal("written row shares metadata with decide's row")
	}
	empty := *next
	empty.Metadata, empty.Value = []byte{}, []byte{}
	if _, row, _ := writeMutation("lease", &empty); row.Metadata != nil || row.Value != nil {
		t.Fatalf("empty metadata and value read back as %q, %q, want nil (NULL)", row.Metadata, row.Value)
	}
	if m, row, _ := writeMutation("lease", next); row.Value != nil || !strings.Contains(fmt.Sprint(m), "Succession") {
		t.Fatalf("a row without a value writes %v, reads back as %+v", m, row)
	}
	valued := *next
	valued.Value = []byte(`{"priority":4}`)
	_, row, err = writeMutation("lease", &valued)
	if err != nil || string(row.Value) != `{"priority":4}` {
		t.Fatalf("writeMutation of a value = %+v, %v", row, err)
	}
	row.Value[1] = 'X'
	if string(valued.Value) != `{"priority":4}` {
		t.Fatal("written row shares the value with decide's row")
	}
	bad := *next
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
	rec, err := lease.DecodeRow(*old.row())
	if err != nil || rec.RevokedBy != "op" || rec.RevokeReason != "stuck" || rec.Priority != 2 || rec.Principal != "p" {
		t.Fatalf("the older row reads back as %+v, %v; want revoked by op, priority 2", rec, err)
	}
	row, err := lease.EncodeRow(rec)
	if err != nil {
		t.Fatal(err)
	}
	_, written, err := writeMutation("n", &row)
	if back, derr := lease.DecodeRow(*written); err != nil || derr != nil || back.RevokeReason != "stuck" || back.RevokedBy != "op" {
		t.Fatalf("writeMutation of the revoked record = %+v, %v, %v", back, err, derr)
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
