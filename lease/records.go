package lease

import (
	"context"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

// records is the backend.Loop as the rules of this package see it: the
// driver trades in backend.Rows, the rules in Records. It is the one place
// that decodes a row before a decision and encodes the record a decision
// makes, so no driver knows a field of the lease that it does not keep in
// a column of its own.
type records struct {
	loop *backend.Loop
}

// DecodeSnapshot decodes the row of s (nil stays nil).
func DecodeSnapshot(s backend.Snapshot) (Snapshot, error) {
	out := Snapshot{ServerTime: s.ServerTime}
	if s.Row != nil {
		r, err := DecodeRow(*s.Row)
		if err != nil {
			return Snapshot{}, err
		}
		out.Record = r
	}
	return out, nil
}

// Get reads the record under name (see backend.Loop.Get).
func (rs records) Get(ctx context.Context, name string) (Snapshot, error) {
	return GetWith(ctx, rs.loop.Get, name)
}

// GetWith reads the row under name with get (a backend.Loop's or a
// backend.Store's Get) and decodes it (DecodeSnapshot).
func GetWith(ctx context.Context, get func(context.Context, string) (backend.Snapshot, error), name string) (Snapshot, error) {
	snap, err := get(ctx, name)
	if err != nil {
		return Snapshot{}, err
	}
	return DecodeSnapshot(snap)
}

// Update decides, on the record under name, what to store (see
// backend.Loop.Update and UpdateWith).
func (rs records) Update(ctx context.Context, name string, decide Decide) (Snapshot, error) {
	return UpdateWith(ctx, rs.loop.Update, name, decide)
}

// UpdateWith makes update (a backend.Loop's Update, or a backend.Store's
// Try for one attempt) decide on the record under name: decide sees the
// snapshot's row decoded (DecodeRow), and the record it returns is encoded
// (EncodeRow) for the driver to store. It returns the snapshot that
// decide's answer produced, decoded. An error of decide, or of the codec,
// is returned unchanged, with nothing written.
func UpdateWith(ctx context.Context, update func(context.Context, string, backend.Decide) (backend.Snapshot, error), name string, decide Decide) (Snapshot, error) {
	// seen is the last row decide read and its record, so that an answer
	// that wrote nothing is not decoded twice.
	var seen struct {
		row *backend.Row
		rec *Record
	}
	snap, err := update(ctx, name, func(s backend.Snapshot) (*backend.Row, error) {
		cur, err := DecodeSnapshot(s)
		if err != nil {
			return nil, err
		}
		seen.row, seen.rec = s.Row, cur.Record
		next, err := decide(cur)
		if err != nil || next == nil {
			return nil, err
		}
		row, err := EncodeRow(next)
		if err != nil {
			return nil, err
		}
		return &row, nil
	})
	if err != nil {
		return Snapshot{}, err
	}
	if snap.Row != nil && snap.Row == seen.row {
		return Snapshot{Record: seen.rec, ServerTime: snap.ServerTime}, nil
	}
	return DecodeSnapshot(snap)
}

// List lists records (see backend.Loop.List).
func (rs records) List(ctx context.Context, prefix, after string, limit int) ([]Record, time.Time, error) {
	rows, at, err := rs.loop.List(ctx, prefix, after, limit)
	if err != nil {
		return nil, time.Time{}, err
	}
	recs, err := DecodeRows(rows)
	return recs, at, err
}

// Ping reports whether the backend answers.
func (rs records) Ping(ctx context.Context) error { return rs.loop.Ping(ctx) }

// ExpectWrite says that the next Update of name will likely write (see
// backend.Loop.ExpectWrite).
func (rs records) ExpectWrite(name string) { rs.loop.ExpectWrite(name) }

// ScanExpiry returns, decoded, the rows that sc.ScanExpiry returns (see
// backend.ExpiryScanner): the records that sort after the cursor and
// expire at or before until, in (ExpireTime, Name) order.
func ScanExpiry(ctx context.Context, sc backend.ExpiryScanner, after backend.Cursor, until time.Time, limit int) ([]Record, error) {
	rows, err := sc.ScanExpiry(ctx, after, until, limit)
	if err != nil {
		return nil, err
	}
	return DecodeRows(rows)
}

// decodeRows decodes every row.
func DecodeRows(rows []backend.Row) ([]Record, error) {
	recs := make([]Record, len(rows))
	for i := range rows {
		r, err := DecodeRow(rows[i])
		if err != nil {
			return nil, err
		}
		recs[i] = *r
	}
	return recs, nil
}
