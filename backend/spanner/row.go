package spanner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"

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

// leaseRow is one row of recordColumns, decoded by column name.
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
	RevokedBy    spanner.NullString
	RevokeReason spanner.NullString
	// Succession is the succession state of docs/contract.md §8, the JSON
	// of backend.MarshalSuccession; NULL when there is none.
	Succession spanner.NullString
}

// record converts a row to the record it stores.
func (r *leaseRow) record() (*backend.Record, error) {
	rec := &backend.Record{
		Name:         r.Name,
		Holder:       r.Holder,
		FencingToken: r.FencingToken,
		TTL:          time.Duration(r.TtlMs) * time.Millisecond,
		AcquireTime:  r.AcquireTime,
		RenewTime:    r.RenewTime,
		ExpireTime:   r.ExpireTime,
		Transitions:  r.Transitions,
		Principal:    r.Principal.StringVal, // "" when NULL
		RevokedBy:    r.RevokedBy.StringVal,
		RevokeReason: r.RevokeReason.StringVal,
	}
	if r.Metadata.Valid && r.Metadata.StringVal != "" {
		rec.Metadata = []byte(r.Metadata.StringVal)
	}
	if err := backend.UnmarshalSuccession([]byte(r.Succession.StringVal), rec); err != nil {
		return nil, fmt.Errorf("decode the lease row: %w", err)
	}
	return rec, nil
}

// readSQL reads one lease row together with the server time in one
// statement, so inside a read-write transaction the decision time and the
// row come from the same step. It also reads the row's UpdateTime (the
// commit timestamp of the write it shows), because CURRENT_TIMESTAMP() can
// precede that commit (measured on the emulator: by up to 11 ms), and a
// decision must never precede the commit of what it read. It always yields exactly one row; the lease
// is an array of zero or one element, read by primary key (a point read,
// which locks just that key inside a read-write transaction, whether the
// row exists or not).
const readSQL = `SELECT CURRENT_TIMESTAMP() AS Now,
  ARRAY(SELECT AS STRUCT ` + recordColumns + ` FROM Leases WHERE Name = @name) AS Lease,
  (SELECT UpdateTime FROM Leases WHERE Name = @name) AS Updated`

// querier is what both kinds of transaction offer for a query.
type querier interface {
	Query(ctx context.Context, stmt spanner.Statement) *spanner.RowIterator
}

// readRow runs readSQL and returns the record (nil when absent) and the
// decision time: CURRENT_TIMESTAMP(), or the row's commit timestamp when
// that is later.
func readRow(ctx context.Context, q querier, name string) (*backend.Record, time.Time, error) {
	it := q.Query(ctx, spanner.Statement{SQL: readSQL, Params: map[string]any{"name": name}})
	defer it.Stop()
	row, err := it.Next()
	if errors.Is(err, iterator.Done) {
		return nil, time.Time{}, errors.New("read returned no row") // SELECT without FROM yields one
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	var (
		now     time.Time
		rows    []*leaseRow
		updated spanner.NullTime
	)
	if err := row.Columns(&now, &rows, &updated); err != nil {
		return nil, time.Time{}, fmt.Errorf("decode the lease row: %w", err)
	}
	if updated.Valid && updated.Time.After(now) {
		now = updated.Time
	}
	switch len(rows) {
	case 0:
		return nil, now, nil
	case 1:
		rec, err := rows[0].record()
		return rec, now, err
	}
	return nil, time.Time{}, fmt.Errorf("%d rows under one primary key", len(rows))
}

// writeMutation returns the mutation that stores next under name, with
// UpdateTime the commit timestamp, and the record as it will read back.
func writeMutation(name string, next *backend.Record) (*spanner.Mutation, *backend.Record, error) {
	if next.TTL%time.Millisecond != 0 {
		return nil, nil, fmt.Errorf("record TTL %v is not a whole number of milliseconds (the TtlMs column)", next.TTL)
	}
	if !utf8.Valid(next.Metadata) {
		return nil, nil, errors.New("record metadata is not valid UTF-8 (the Metadata column is a STRING)")
	}
	succ, err := backend.MarshalSuccession(next)
	if err != nil {
		return nil, nil, err
	}
	rec := *next
	rec.Name = name
	if err := backend.UnmarshalSuccession(succ, &rec); err != nil { // as it reads back, a copy
		return nil, nil, err
	}
	rec.Metadata = nil
	md := spanner.NullString{}
	if len(next.Metadata) > 0 {
		rec.Metadata = slices.Clone(next.Metadata)
		md = spanner.NullString{StringVal: string(next.Metadata), Valid: true}
	}
	m := spanner.InsertOrUpdate(Table, writeColumns, []any{
		rec.Name, rec.Holder, rec.FencingToken, rec.TTL.Milliseconds(), rec.AcquireTime, rec.RenewTime,
		rec.ExpireTime, rec.Transitions, md, spanner.CommitTimestamp,
		nullIfEmpty(rec.Principal), nullIfEmpty(rec.RevokedBy), nullIfEmpty(rec.RevokeReason), nullIfEmpty(string(succ)),
	})
	return m, &rec, nil
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

// ReadForUpdate reads the record under name with CURRENT_TIMESTAMP() in tx,
// as Try does: for tools that measure the backend's own work without the
// service (leasebench's direct path), so that they read what the Store
// reads.
func ReadForUpdate(ctx context.Context, tx *spanner.ReadWriteTransaction, name string) (*backend.Record, time.Time, error) {
	return readRow(ctx, tx, name)
}

// Mutation is the write of rec under name as Try buffers it (see
// ReadForUpdate).
func Mutation(name string, rec *backend.Record) (*spanner.Mutation, error) {
	m, _, err := writeMutation(name, rec)
	return m, err
}
