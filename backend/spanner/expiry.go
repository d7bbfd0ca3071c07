package spanner

import (
	"context"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/leasesvc/leasesvc/backend"
)

// expiryIndex is the index of schema.sql on ExpireTime that ScanExpiry reads.
const expiryIndex = "LeasesByExpireTime"

var _ backend.ExpiryScanner = (*Store)(nil)

// scanExpirySQL reads the index on ExpireTime from the cursor up to until
// (the index's key is (ExpireTime, Name), so the cursor is a seek) and joins
// back to the table for the other columns of each row found.
const scanExpirySQL = `SELECT ` + recordColumns + `
FROM Leases@{FORCE_INDEX=` + expiryIndex + `}
WHERE (ExpireTime > @afterTime OR (ExpireTime = @afterTime AND Name > @afterName))
  AND ExpireTime <= @until
ORDER BY ExpireTime, Name
LIMIT @limit`

// ScanExpiry implements backend.ExpiryScanner with a strong single read of
// the index on ExpireTime: its cost is proportional to the rows in the
// window, not to the number of leases.
func (s *Store) ScanExpiry(ctx context.Context, after backend.Cursor, until time.Time, limit int) ([]backend.Row, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("spanner: scan expiry: limit %d must be positive", limit)
	}
	stmt := spanner.Statement{SQL: scanExpirySQL, Params: map[string]any{
		"afterTime": after.ExpireTime, "afterName": after.Name, "until": until, "limit": int64(limit),
	}}
	var rows []backend.Row
	err := s.client.Single().Query(ctx, stmt).Do(func(row *spanner.Row) error {
		var r leaseRow
		if err := row.ToStruct(&r); err != nil {
			return fmt.Errorf("decode a lease row: %w", err)
		}
		rows = append(rows, *r.row())
		return nil
	})
	if err != nil {
		return nil, classify("scan expiry", err)
	}
	return rows, nil
}
