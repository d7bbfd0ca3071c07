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
}

// recordColumns are the columns a read returns for a record (UpdateTime is
// for operators and is not read back).
const recordColumns = "Name, Holder, FencingToken, TtlMs, AcquireTime, RenewTime, ExpireTime, Transitions, Metadata"

// readSQL reads one lease row, or NULLs when there is none, together with
// the server time: one statement, so inside a read-write transaction the
// decision time and the row come from the same step.
const readSQL = `SELECT CURRENT_TIMESTAMP() AS Now,
  l.Name, l.Holder, l.FencingToken, l.TtlMs, l.AcquireTime, l.RenewTime, l.ExpireTime, l.Transitions, l.Metadata
FROM (SELECT 1) AS one LEFT JOIN Leases AS l ON l.Name = @name`

// querier is what both kinds of transaction offer for a query.
type querier interface {
	Query(ctx context.Context, stmt spanner.Statement) *spanner.RowIterator
}

// readRow runs readSQL and returns the record (nil when absent) and the
// value of CURRENT_TIMESTAMP().
func readRow(ctx context.Context, q querier, name string) (*backend.Record, time.Time, error) {
	it := q.Query(ctx, spanner.Statement{SQL: readSQL, Params: map[string]any{"name": name}})
	defer it.Stop()
	row, err := it.Next()
	if errors.Is(err, iterator.Done) {
		return nil, time.Time{}, errors.New("read returned no row") // the LEFT JOIN always yields one
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	var now time.Time
	if err := row.Column(0, &now); err != nil {
		return nil, time.Time{}, fmt.Errorf("decode CURRENT_TIMESTAMP(): %w", err)
	}
	rec, err := scanRecord(row, 1)
	return rec, now, err
}

// scanRecord decodes the recordColumns of row that start at column first;
// a NULL name (no row under a LEFT JOIN) is a nil record.
func scanRecord(row *spanner.Row, first int) (*backend.Record, error) {
	var (
		name, holder, metadata             spanner.NullString
		token, ttlMs, transitions          spanner.NullInt64
		acquireTime, renewTime, expireTime spanner.NullTime
	)
	dst := []any{&name, &holder, &token, &ttlMs, &acquireTime, &renewTime, &expireTime, &transitions, &metadata}
	for i, d := range dst {
		if err := row.Column(first+i, d); err != nil {
			return nil, fmt.Errorf("decode lease column %d: %w", first+i, err)
		}
	}
	if !name.Valid {
		return nil, nil
	}
	r := &backend.Record{
		Name:         name.StringVal,
		Holder:       holder.StringVal,
		FencingToken: token.Int64,
		TTL:          time.Duration(ttlMs.Int64) * time.Millisecond,
		AcquireTime:  acquireTime.Time,
		RenewTime:    renewTime.Time,
		ExpireTime:   expireTime.Time,
		Transitions:  transitions.Int64,
	}
	if metadata.Valid && metadata.StringVal != "" {
		r.Metadata = []byte(metadata.StringVal)
	}
	return r, nil
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
	rec := *next
	rec.Name = name
	rec.Metadata = nil
	md := spanner.NullString{}
	if len(next.Metadata) > 0 {
		rec.Metadata = slices.Clone(next.Metadata)
		md = spanner.NullString{StringVal: string(next.Metadata), Valid: true}
	}
	m := spanner.InsertOrUpdate(Table, writeColumns, []any{
		rec.Name, rec.Holder, rec.FencingToken, rec.TTL.Milliseconds(), rec.AcquireTime, rec.RenewTime,
		rec.ExpireTime, rec.Transitions, md, spanner.CommitTimestamp,
	})
	return m, &rec, nil
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
