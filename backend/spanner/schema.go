package spanner

import (
	"context"
	_ "embed" // schema.sql
	"errors"
	"fmt"
	"slices"
	"strings"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"cloud.google.com/go/spanner/spansql"
)

// schemaSQL is the DDL of the Leases table. Terraform reads the same file;
// it holds plain DDL statements separated by semicolons and no comments
// (the emulator's DDL parser refuses them).
//
//go:embed schema.sql
var schemaSQL string

// Table is the name of the table that holds one row per lease.
const Table = "Leases"

// ErrNoTable reports a database without the Leases table.
var ErrNoTable = errors.New("spanner: table " + Table + " does not exist")

// Statements returns the DDL statements of schema.sql, without their
// terminating semicolons, ready for UpdateDatabaseDdl.
func Statements() []string {
	var out []string
	for s := range strings.SplitSeq(schemaSQL, ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// column is one column of the table, as schema.sql declares it or as the
// database's INFORMATION_SCHEMA reports it.
type column struct {
	Name            string
	Type            string // as INFORMATION_SCHEMA.COLUMNS.SPANNER_TYPE spells it: STRING(128), INT64
	NotNull         bool
	CommitTimestamp bool // OPTIONS (allow_commit_timestamp = true)
	KeyPosition     int  // 1-based position in the primary key; 0 if not a key column
}

// parseStmt parses one DDL statement with the Spanner module's own DDL
// parser (spansql).
func parseStmt(stmt string) (spansql.DDLStmt, error) {
	d, err := spansql.ParseDDLStmt(stmt)
	if err != nil {
		return nil, fmt.Errorf("spanner: schema: %.40q: %w", stmt, err)
	}
	return d, nil
}

// columnOf is a column as spansql parsed it.
func columnOf(d spansql.ColumnDef) column {
	return column{Name: string(d.Name), Type: normalizeType(d.Type.SQL()), NotNull: d.NotNull,
		CommitTimestamp: d.Options.AllowCommitTimestamp != nil && *d.Options.AllowCommitTimestamp}
}

// parseTable parses one CREATE TABLE statement: its name and columns, with
// the primary key positions.
func parseTable(stmt string) (string, []column, error) {
	d, err := parseStmt(stmt)
	if err != nil {
		return "", nil, err
	}
	ct, ok := d.(*spansql.CreateTable)
	if !ok {
		return "", nil, fmt.Errorf("spanner: schema: not a CREATE TABLE statement: %.40q", stmt)
	}
	var cols []column
	for _, c := range ct.Columns {
		cols = append(cols, columnOf(c))
	}
	for i, k := range ct.PrimaryKey {
		j := slices.IndexFunc(cols, func(c column) bool { return strings.EqualFold(c.Name, string(k.Column)) })
		if j < 0 {
			return "", nil, fmt.Errorf("spanner: schema: table %s: primary key column %q is not a column", ct.Name, k.Column)
		}
		cols[j].KeyPosition = i + 1
	}
	return string(ct.Name), cols, nil
}

// addedColumn returns the column that an ALTER TABLE Table ADD COLUMN
// statement adds, if d is one.
func addedColumn(d spansql.DDLStmt) (column, bool) {
	if at, ok := d.(*spansql.AlterTable); ok && strings.EqualFold(string(at.Name), Table) {
		if add, ok := at.Alteration.(spansql.AddColumn); ok {
			return columnOf(add.Def), true
		}
	}
	return column{}, false
}

// normalizeType spells a type as INFORMATION_SCHEMA does: upper case, no
// spaces ("string( max )" → "STRING(MAX)").
func normalizeType(t string) string {
	return strings.ToUpper(strings.Join(strings.Fields(t), ""))
}

// wantColumns returns the columns that schema.sql declares for Table.
func wantColumns() ([]column, error) { return columnsOf(Statements()) }

// columnsOf returns the columns that stmts declare for Table: its CREATE
// TABLE, then any ALTER TABLE … ADD COLUMN appended later (schema.sql
// changes only by appending statements). Other statements, such as
// indexes, are not checked.
func columnsOf(stmts []string) ([]column, error) {
	var cols []column
	for _, stmt := range stmts {
		d, err := parseStmt(stmt)
		if err != nil {
			return nil, err
		}
		if ct, ok := d.(*spansql.CreateTable); ok && strings.EqualFold(string(ct.Name), Table) {
			if _, cols, err = parseTable(stmt); err != nil {
				return nil, err
			}
			continue
		}
		if c, ok := addedColumn(d); ok {
			if cols == nil {
				return nil, fmt.Errorf("spanner: schema: %.40q comes before CREATE TABLE %s", stmt, Table)
			}
			cols = append(cols, c)
		}
	}
	if cols == nil {
		return nil, fmt.Errorf("spanner: schema: no CREATE TABLE %s", Table)
	}
	return cols, nil
}

// diffColumns compares the columns a database has with the ones schema.sql
// wants and describes each difference. Extra columns are allowed when they
// are nullable, since InsertOrUpdate leaves them alone; an extra NOT NULL
// column would make every insert fail.
func diffColumns(want, got []column) []string {
	var diffs []string
	have := make(map[string]column, len(got))
	for _, c := range got {
		have[strings.ToLower(c.Name)] = c
	}
	for _, w := range want {
		g, ok := have[strings.ToLower(w.Name)]
		delete(have, strings.ToLower(w.Name))
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("column %s is missing", w.Name))
			continue
		case g.Type != w.Type:
			diffs = append(diffs, fmt.Sprintf("column %s is %s, want %s", w.Name, g.Type, w.Type))
		}
		if g.NotNull != w.NotNull {
			diffs = append(diffs, fmt.Sprintf("column %s is %s, want %s", w.Name, nullability(g.NotNull), nullability(w.NotNull)))
		}
		if g.CommitTimestamp != w.CommitTimestamp {
			diffs = append(diffs, fmt.Sprintf("column %s has allow_commit_timestamp=%t, want %t", w.Name, g.CommitTimestamp, w.CommitTimestamp))
		}
		if g.KeyPosition != w.KeyPosition {
			diffs = append(diffs, fmt.Sprintf("column %s is at primary key position %d, want %d (0: not a key column)", w.Name, g.KeyPosition, w.KeyPosition))
		}
	}
	for _, g := range got { // in the database's column order
		if _, extra := have[strings.ToLower(g.Name)]; extra && (g.NotNull || g.KeyPosition != 0) {
			diffs = append(diffs, fmt.Sprintf("extra column %s must be nullable and not part of the primary key", g.Name))
		}
	}
	return diffs
}

func nullability(notNull bool) string {
	if notNull {
		return "NOT NULL"
	}
	return "nullable"
}

// columnsSQL reads a table's columns, their options and primary key from
// INFORMATION_SCHEMA.
const columnsSQL = `SELECT c.COLUMN_NAME, c.SPANNER_TYPE, c.IS_NULLABLE,
  ARRAY(SELECT o.OPTION_VALUE FROM INFORMATION_SCHEMA.COLUMN_OPTIONS AS o
        WHERE o.TABLE_SCHEMA = c.TABLE_SCHEMA AND o.TABLE_NAME = c.TABLE_NAME
          AND o.COLUMN_NAME = c.COLUMN_NAME AND o.OPTION_NAME = 'allow_commit_timestamp') AS CommitTs,
  ARRAY(SELECT k.ORDINAL_POSITION FROM INFORMATION_SCHEMA.INDEX_COLUMNS AS k
        WHERE k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME
          AND k.INDEX_NAME = 'PRIMARY_KEY' AND k.COLUMN_NAME = c.COLUMN_NAME) AS KeyPos
FROM INFORMATION_SCHEMA.COLUMNS AS c
WHERE c.TABLE_CATALOG = '' AND c.TABLE_SCHEMA = '' AND c.TABLE_NAME = @table
ORDER BY c.ORDINAL_POSITION`

// readColumns returns the columns of table in the database; none when the
// table does not exist.
func readColumns(ctx context.Context, client *spanner.Client, table string) ([]column, error) {
	it := client.Single().Query(ctx, spanner.Statement{SQL: columnsSQL, Params: map[string]any{"table": table}})
	var cols []column
	err := it.Do(func(r *spanner.Row) error {
		var (
			name, typ, nullable string
			commitTS            []spanner.NullString
			keyPos              []spanner.NullInt64
		)
		if err := r.Columns(&name, &typ, &nullable, &commitTS, &keyPos); err != nil {
			return err
		}
		c := column{Name: name, Type: normalizeType(typ), NotNull: nullable == "NO"}
		for _, v := range commitTS {
			c.CommitTimestamp = c.CommitTimestamp || strings.EqualFold(v.StringVal, "TRUE")
		}
		for _, p := range keyPos {
			if p.Valid {
				c.KeyPosition = int(p.Int64)
			}
		}
		cols = append(cols, c)
		return nil
	})
	if err != nil {
		err = classify("read the columns of table "+table, err)
		return nil, err
	}
	return cols, nil
}

// CheckSchema verifies that the database has the Leases table of
// schema.sql: every column with its type, nullability and commit-timestamp
// option, the primary key, and the key columns of every index. Extra
// nullable columns and extra indexes are allowed. A missing table is
// ErrNoTable; a different one is an error that lists every difference.
// CheckSchema changes nothing.
func CheckSchema(ctx context.Context, client *spanner.Client) error {
	if client == nil {
		return errors.New("spanner: CheckSchema: client is nil")
	}
	want, err := wantColumns()
	if err != nil {
		return err
	}
	got, err := readColumns(ctx, client, Table)
	if err != nil {
		return err
	}
	if len(got) == 0 {
		return fmt.Errorf("%w in %s", ErrNoTable, client.DatabaseName())
	}
	wantIx, err := indexesOf(Statements())
	if err != nil {
		return err
	}
	gotIx, err := readIndexes(ctx, client, Table)
	if err != nil {
		return err
	}
	if diffs := append(diffColumns(want, got), diffIndexes(wantIx, gotIx)...); len(diffs) > 0 {
		return fmt.Errorf("spanner: table %s in %s differs from schema.sql and is not altered automatically: %s",
			Table, client.DatabaseName(), strings.Join(diffs, "; "))
	}
	return nil
}

// Migrate creates the Leases table of schema.sql in the client's database
// when it does not exist, then checks it with CheckSchema. Of an existing
// table it only adds the nullable columns that schema.sql appends with ALTER
// TABLE … ADD COLUMN and the table lacks (rows written before read them as
// NULL), when they are its only difference from schema.sql; any other
// difference is an error and nothing is altered. It
// reports whether it created the table. Several processes may migrate at
// once; the losers of the race find the table and succeed.
func Migrate(ctx context.Context, admin *database.DatabaseAdminClient, client *spanner.Client) (created bool, err error) {
	if admin == nil || client == nil {
		return false, errors.New("spanner: Migrate: admin and client must not be nil")
	}
	err = CheckSchema(ctx, client)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, ErrNoTable) {
		// The table exists: add the columns schema.sql appended since it was
		// created, if that is what it lacks; anything else is refused.
		added, addErr := addColumns(ctx, admin, client)
		if addErr != nil {
			return false, addErr
		}
		if !added {
			return false, err // a table that differs otherwise, or the database did not answer
		}
		return false, CheckSchema(ctx, client)
	}
	switch err := runDDL(ctx, admin, client, Statements(), "create table "+Table); {
	case errors.Is(err, errSchemaDoneElsewhere):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, CheckSchema(ctx, client)
}

// errSchemaDoneElsewhere reports DDL that failed because another process
// ran it first: the schema now matches schema.sql.
var errSchemaDoneElsewhere = errors.New("spanner: schema changed by another process")

// runDDL runs stmts and waits for them. When they fail but the schema
// matches schema.sql afterwards (another process migrated meanwhile) it
// returns errSchemaDoneElsewhere; what names the change in other errors.
func runDDL(ctx context.Context, admin *database.DatabaseAdminClient, client *spanner.Client, stmts []string, what string) error {
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{
		Database:   client.DatabaseName(),
		Statements: stmts,
	})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if CheckSchema(ctx, client) == nil {
		return errSchemaDoneElsewhere
	}
	err = classify(what, err)
	return err
}

// addColumns runs the ALTER TABLE … ADD COLUMN statements of schema.sql
// whose column the existing table lacks, and reports whether it ran any.
func addColumns(ctx context.Context, admin *database.DatabaseAdminClient, client *spanner.Client) (bool, error) {
	got, err := readColumns(ctx, client, Table)
	if err != nil {
		return false, err
	}
	have := make(map[string]bool, len(got))
	for _, c := range got {
		have[strings.ToLower(c.Name)] = true
	}
	var stmts []string
	for _, stmt := range Statements() {
		d, err := parseStmt(stmt)
		if err != nil {
			return false, err
		}
		if c, ok := addedColumn(d); ok && !have[strings.ToLower(c.Name)] {
			stmts = append(stmts, stmt)
		}
	}
	if len(stmts) == 0 {
		return false, nil
	}
	// Alter only a table that differs from schema.sql by those columns alone.
	want, err := wantColumns()
	if err != nil {
		return false, err
	}
	want = slices.DeleteFunc(want, func(c column) bool { return !have[strings.ToLower(c.Name)] })
	wantIx, err := indexesOf(Statements())
	if err != nil {
		return false, err
	}
	gotIx, err := readIndexes(ctx, client, Table)
	if err != nil {
		return false, err
	}
	if len(diffColumns(want, got)) > 0 || len(diffIndexes(wantIx, gotIx)) > 0 {
		return false, nil
	}
	if err := runDDL(ctx, admin, client, stmts, "add columns to table "+Table); err != nil && !errors.Is(err, errSchemaDoneElsewhere) {
		return false, err
	}
	return true, nil
}
