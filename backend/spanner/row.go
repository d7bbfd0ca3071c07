package spanner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/leasesvc/leasesvc/backend"
)

// writeColumns are the columns of a lease row, in the order of the values
// that writeMutation builds.
var writeColumns = []string{
	"Name", "Holder", "FencingToken", "TtlMs", "AcquireTime", "RenewTime",
	"ExpireTime", "Transitions", "Metadata", "UpdateTime",
	"Principal", "RevokedBy", "RevokeReason", "Succession",
}

// recordColumns are the columns a read returns for a record (UpdateTime is
// for operators and is not read back), in the order of leaseRow's fields.
const recordColumns = "Name, Holder, FencingToken, TtlMs, AcquireTime, RenewTime, ExpireTime, Transitions, Metadata, Principal, RevokedBy, RevokeReason, Succession"

// leaseRow is one row of recordColumns, decoded by column name: the
// columns of a backend.Row.
type leaseRow struct {
	Name         string
	Holder       string
	FencingToken int64
	TtlMs        int64
	AcquireTime  time.Time
	RenewTime    time.Time
	ExpireTime   time.Time
	Transitions  int64
	Metadata     spanner.NullString
	Principal    spanner.NullString
	// RevokedBy and RevokeReason are the row's backend.Legacy columns:
	// written NULL, read for rows that older versions wrote.
	RevokedBy    spanner.NullString
	RevokeReason spanner.NullString
	// Succession holds backend.Row.Value, the encoded value of every
	// field that is not a column of its own (the column's name is that of
	// its first content, the succession state); NULL when there is none.
	Succession spanner.NullString
}

// row converts a row of columns to the backend.Row it stores.
func (r *leaseRow) row() *backend.Row {
	row := &backend.Row{
		Name:         r.Name,
		Holder:       r.Holder,
		FencingToken: r.FencingToken,
		TTL:          time.Duration(r.TtlMs) * time.Millisecond,
		AcquireTime:  r.AcquireTime,
		RenewTime:    r.RenewTime,
		ExpireTime:   r.ExpireTime,
		Transitions:  r.Transitions,
		Principal:    r.Principal.StringVal,
		Legacy:       backend.Legacy{RevokedBy: r.RevokedBy.StringVal, RevokeReason: r.RevokeReason.StringVal},
	}
	if r.Metadata.StringVal != "" { // "" when NULL
		row.Metadata = []byte(r.Metadata.StringVal)
	}
	if r.Succession.StringVal != "" {
		row.Value = []byte(r.Succession.StringVal)
	}
	return row
}

// readForUpdate reads the row under name in tx as a batch of one does
// (readRows): CURRENT_TIMESTAMP(), then a point read of the key, which
// locks it whether the row exists or not. It returns the row (nil when
// absent) and the decision time: CURRENT_TIMESTAMP(), or the row's commit
// timestamp (UpdateTime) when that is later, because CURRENT_TIMESTAMP()
// can precede that commit (measured on the emulator: by up to 11 ms), and a
// decision must never precede the commit of what it read. (One SQL
// statement reading the row with CURRENT_TIMESTAMP(), one round trip fewer,
// is a scan of the whole table on the emulator: 45 ms at 2,000 rows, 120 ms
// at 6,000, where the key read and the clock take 6–9 ms;
// docs/spanner.md#per-operation-cost.)
func readForUpdate(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (*backend.Row, time.Time, error) {
	recs, now, updated, err := readRows(ctx, tx, []string{name})
	if err != nil {
		return nil, time.Time{}, err
	}
	if u, ok := updated[name]; ok && u.After(now) {
		now = u
	}
	return recs[name], now, nil
}

// readKey reads the row under name by key in ro (nil when absent).
func readKey(ctx context.Context, ro *spanner.ReadOnlyTransaction, name string) (*backend.Row, error) {
	row, err := ro.ReadRow(ctx, Table, spanner.Key{name}, recordColumnList)
	if spanner.ErrCode(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r leaseRow
	if err := row.ToStructLenient(&r); err != nil {
		return nil, fmt.Errorf("decode the lease row: %w", err)
	}
	return r.row(), nil
}

// recordColumnList is recordColumns, one column an element.
var recordColumnList = strings.Split(recordColumns, ", ")

// writeMutation returns the mutation that stores next under name, with
// UpdateTime the commit timestamp, and the row as it will read back (a
// copy).
func writeMutation(name string, next *backend.Row) (*spanner.Mutation, *backend.Row, error) {
	if next.TTL%time.Millisecond != 0 {
		return nil, nil, fmt.Errorf("row TTL %v is not a whole number of milliseconds (the TtlMs column)", next.TTL)
	}
	if !utf8.Valid(next.Metadata) {
		return nil, nil, errors.New("row metadata is not valid UTF-8 (the Metadata column is a STRING)")
	}
	row := backend.Clone(*next)
	row.Name = name
	if len(row.Metadata) == 0 {
		row.Metadata = nil
	}
	if len(row.Value) == 0 {
		row.Value = nil
	}
	return spanner.InsertOrUpdate(Table, writeColumns, writeValues(row)), &row, nil
}

// writeValues are the values of writeColumns that store row.
func writeValues(row backend.Row) []any {
	return []any{
		row.Name, row.Holder, row.FencingToken, row.TTL.Milliseconds(), row.AcquireTime, row.RenewTime,
		row.ExpireTime, row.Transitions, nullIfEmpty(string(row.Metadata)), spanner.CommitTimestamp,
		nullIfEmpty(row.Principal), nullIfEmpty(row.Legacy.RevokedBy), nullIfEmpty(row.Legacy.RevokeReason), nullIfEmpty(string(row.Value)),
	}
}

// nullIfEmpty stores an empty string as NULL, as rows written before a
// column existed hold it.
func nullIfEmpty(s string) spanner.NullString {
	return spanner.NullString{StringVal: s, Valid: s != ""}
}

// listSQL returns the statement that lists names starting with prefix and
// sorting after "after": a range scan of the primary key. Spanner orders
// STRING by UTF-8 bytes, so [prefix, prefixEnd(prefix)) is exactly the
// names that start with prefix; STARTS_WITH states the same for readers and
// covers a prefix without an end.
func listSQL(prefix, after string, limit int) spanner.Statement {
	sql := "SELECT " + recordColumns + " FROM Leases WHERE Name > @after"
	params := map[string]any{"after": after, "limit": int64(limit)}
	if prefix != "" {
		sql += " AND Name >= @prefix AND STARTS_WITH(Name, @prefix)"
		params["prefix"] = prefix
		if end, ok := prefixEnd(prefix); ok {
			sql += " AND Name < @end"
			params["end"] = end
		}
	}
	sql += " ORDER BY Name LIMIT @limit"
	return spanner.Statement{SQL: sql, Params: params}
}

// prefixEnd returns a valid UTF-8 string greater than every string that
// starts with prefix: prefix cut after its last ASCII byte below 0x7f, with
// that byte incremented. For the ASCII prefixes of lease names it is the
// least such string, so the scan reads nothing outside the prefix. ok is
// false when no byte can be incremented.
func prefixEnd(prefix string) (string, bool) {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0x7f { // stay within ASCII, so the result is valid UTF-8
			b[i]++
			return string(b[:i+1]), true
		}
	}
	return "", false
}

// ReadForUpdate reads the row under name and the decision time in tx,
// as Try does: for tools that measure the backend's own work without the
// service (leasebench's direct path), so that they read what the Store
// reads.
func ReadForUpdate(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (*backend.Row, time.Time, error) {
	return readForUpdate(ctx, tx, name)
}

// Mutation is the write of row under name as Try buffers it (see
// ReadForUpdate).
func Mutation(name string, row *backend.Row) (*spanner.Mutation, error) {
	m, _, err := writeMutation(name, row)
	return m, err
}
