package spanner

import (
	"strings"
	"testing"
)

func TestSchemaParses(t *testing.T) {
	stmts := Statements()
	if len(stmts) != 6 || strings.Contains(schemaSQL, "--") || strings.Contains(schemaSQL, "/*") {
		t.Fatalf("schema.sql must hold the table, its index and four added columns, without comments; got %q", stmts)
	}
	ix, err := indexesOf(stmts)
	if err != nil || len(ix) != 1 || ix[0].Name != expiryIndex || strings.Join(ix[0].Keys, ",") != "ExpireTime" {
		t.Fatalf("indexes of schema.sql = %+v, %v; want %s on (ExpireTime)", ix, err, expiryIndex)
	}
	cols, err := wantColumns()
	if err != nil {
		t.Fatal(err)
	}
	want := []column{
		{"Name", "STRING(128)", true, false, 1},
		{"Holder", "STRING(256)", true, false, 0},
		{"FencingToken", "INT64", true, false, 0},
		{"TtlMs", "INT64", true, false, 0},
		{"AcquireTime", "TIMESTAMP", true, false, 0},
		{"RenewTime", "TIMESTAMP", true, false, 0},
		{"ExpireTime", "TIMESTAMP", true, false, 0},
		{"Transitions", "INT64", true, false, 0},
		{"Metadata", "STRING(MAX)", false, false, 0},
		{"UpdateTime", "TIMESTAMP", true, true, 0},
		{"Principal", "STRING(MAX)", false, false, 0},
		{"RevokedBy", "STRING(MAX)", false, false, 0},
		{"RevokeReason", "STRING(MAX)", false, false, 0},
		{"Succession", "STRING(MAX)", false, false, 0},
	}
	if len(cols) != len(want) {
		t.Fatalf("schema.sql has %d columns, want %d: %+v", len(cols), len(want), cols)
	}
	for i := range want {
		if cols[i] != want[i] {
			t.Errorf("column %d = %+v, want %+v", i, cols[i], want[i])
		}
	}
	// Every column that Update writes and reads is in the schema.
	have := map[string]bool{}
	for _, c := range cols {
		have[c.Name] = true
	}
	for _, c := range append(writeColumns, strings.Split(recordColumns, ", ")...) {
		if !have[c] {
			t.Errorf("column %s is used by the store but not in schema.sql", c)
		}
	}
}

func TestParseTable(t *testing.T) {
	table, cols, err := parseTable("create table T (\n a string( max ) not null,\n b INT64 OPTIONS (allow_commit_timestamp=true),\n c ARRAY<INT64>,\n) primary key (b, a)")
	if err != nil {
		t.Fatal(err)
	}
	want := []column{{"a", "STRING(MAX)", true, false, 2}, {"b", "INT64", false, true, 1}}
	if table != "T" || len(cols) < 2 || cols[0] != want[0] || cols[1] != want[1] {
		t.Fatalf("parseTable = %s %+v, want T %+v…", table, cols, want)
	}
	for _, bad := range []string{
		"CREATE INDEX X ON Leases (Holder)",
		"CREATE TABLE T (a INT64) PRIMARY KEY (b)",
		"CREATE TABLE T (a INT64 PRIMARY KEY (a)",
	} {
		if _, _, err := parseTable(bad); err == nil {
			t.Errorf("parseTable(%q) succeeded, want an error", bad)
		}
	}
}

func TestDiffColumns(t *testing.T) {
	want, err := wantColumns()
	if err != nil {
		t.Fatal(err)
	}
	same := append([]column(nil), want...)
	if d := diffColumns(want, same); len(d) != 0 {
		t.Fatalf("diff of the schema with itself: %v", d)
	}
	extra := append(append([]column(nil), want...), column{Name: "Note", Type: "STRING(MAX)"})
	if d := diffColumns(want, extra); len(d) != 0 {
		t.Fatalf("an extra nullable column is refused: %v", d)
	}
	var changed []column
	for _, c := range want {
		switch c.Name {
		case "Metadata":
			c.Type = "JSON"
		case "Transitions":
			continue
		case "UpdateTime":
			c.CommitTimestamp = false
		case "Holder":
			c.NotNull = false
		}
		changed = append(changed, c)
	}
	changed = append(changed, column{Name: "Owner", Type: "STRING(64)", NotNull: true})
	d := strings.Join(diffColumns(want, changed), "; ")
	for _, s := range []string{
		"column Metadata is JSON, want STRING(MAX)",
		"column Transitions is missing",
		"column UpdateTime has allow_commit_timestamp=false, want true",
		"column Holder is nullable, want NOT NULL",
		"extra column Owner must be nullable",
	} {
		if !strings.Contains(d, s) {
			t.Errorf("diff %q does not say %q", d, s)
		}
	}
}

func TestColumnsOfAppendedStatements(t *testing.T) {
	stmts := append(Statements(),
		"CREATE INDEX LeasesByExpiry ON Leases (ExpireTime)",
		"ALTER TABLE Leases ADD COLUMN Region STRING(64)",
		"ALTER TABLE Other ADD COLUMN X INT64",
	)
	cols, err := columnsOf(stmts)
	if err != nil {
		t.Fatal(err)
	}
	last := cols[len(cols)-1]
	if len(cols) != 15 || last != (column{Name: "Region", Type: "STRING(64)"}) {
		t.Fatalf("columns = %+v, want the 14 of schema.sql and Region", cols)
	}
	if _, err := columnsOf([]string{"ALTER TABLE Leases ADD COLUMN Region STRING(64)"}); err == nil {
		t.Fatal("ADD COLUMN before CREATE TABLE accepted")
	}
	if _, err := columnsOf([]string{"CREATE INDEX I ON Leases (Holder)"}); err == nil {
		t.Fatal("statements without CREATE TABLE Leases accepted")
	}
}

func TestIndexes(t *testing.T) {
	ix, err := indexesOf([]string{
		"CREATE TABLE Leases (Name STRING(128) NOT NULL) PRIMARY KEY (Name)",
		"CREATE NULL_FILTERED INDEX ByHolder ON Leases (Holder DESC, ExpireTime ASC) STORING (TtlMs)",
		"CREATE INDEX Elsewhere ON Other (X)",
	})
	if err != nil || len(ix) != 1 || ix[0].Name != "ByHolder" || strings.Join(ix[0].Keys, ",") != "Holder DESC,ExpireTime" {
		t.Fatalf("indexesOf = %+v, %v", ix, err)
	}
	want := []index{{Name: "A", Keys: []string{"ExpireTime"}, DDL: "CREATE INDEX A ON Leases (ExpireTime)"}, {Name: "B", Keys: []string{"Holder"}}}
	d := strings.Join(diffIndexes(want, map[string][]string{"B": {"Holder DESC"}, "C": {"X"}}), "; ")
	for _, s := range []string{"index A is missing (CREATE INDEX A ON Leases (ExpireTime))", "index B has key (Holder DESC), want (Holder)"} {
		if !strings.Contains(d, s) {
			t.Errorf("diff %q does not say %q", d, s)
		}
	}
	if d := diffIndexes(want, map[string][]string{"A": {"expiretime"}, "B": {"Holder"}, "C": {"X"}}); len(d) != 0 {
		t.Errorf("matching indexes (and an extra one) differ: %v", d)
	}
}
