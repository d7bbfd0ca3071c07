package spanner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/spansql"
)

// index is a secondary index of Table: its name and its key columns in
// order, each "Column" or "Column DESC".
type index struct {
	Name string
	Keys []string
	DDL  string // the statement that creates it, for messages
}

// indexesOf returns the indexes of Table that stmts create.
func indexesOf(stmts []string) ([]index, error) {
	var out []index
	for _, stmt := range stmts {
		d, err := parseStmt(stmt)
		if err != nil {
			return nil, err
		}
		ci, ok := d.(*spansql.CreateIndex)
		if !ok || !strings.EqualFold(string(ci.Table), Table) {
			continue
		}
		ix := index{Name: string(ci.Name), DDL: stmt}
		for _, k := range ci.Columns {
			key := string(k.Column)
			if k.Desc {
				key += " DESC"
			}
			ix.Keys = append(ix.Keys, key)
		}
		out = append(out, ix)
	}
	return out, nil
}

// indexesSQL reads the key columns of a table's secondary indexes.
const indexesSQL = `SELECT INDEX_NAME, COLUMN_NAME, COLUMN_ORDERING
FROM INFORMATION_SCHEMA.INDEX_COLUMNS
WHERE TABLE_CATALOG = '' AND TABLE_SCHEMA = '' AND TABLE_NAME = @table
  AND INDEX_TYPE = 'INDEX' AND ORDINAL_POSITION IS NOT NULL
ORDER BY INDEX_NAME, ORDINAL_POSITION`

// readIndexes returns the key columns of every secondary index of table,
// by index name.
func readIndexes(ctx context.Context, client *spanner.Client, table string) (map[string][]string, error) {
	out := map[string][]string{}
	err := client.Single().Query(ctx, spanner.Statement{SQL: indexesSQL, Params: map[string]any{"table": table}}).Do(func(r *spanner.Row) error {
		var name, col string
		var ordering spanner.NullString
		if err := r.Columns(&name, &col, &ordering); err != nil {
			return err
		}
		if strings.EqualFold(ordering.StringVal, "DESC") {
			col += " DESC"
		}
		out[name] = append(out[name], col)
		return nil
	})
	if err != nil {
		err = classify("read the indexes of table "+table, err)
		return nil, err
	}
	return out, nil
}

// diffIndexes describes each index of want that got lacks or keys
// differently. Extra indexes are allowed.
func diffIndexes(want []index, got map[string][]string) []string {
	var diffs []string
	for _, w := range want {
		g, ok := got[w.Name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("index %s is missing (%s)", w.Name, w.DDL))
		case !slices.EqualFunc(g, w.Keys, strings.EqualFold):
			diffs = append(diffs, fmt.Sprintf("index %s has key (%s), want (%s)", w.Name, strings.Join(g, ", "), strings.Join(w.Keys, ", ")))
		}
	}
	return diffs
}
