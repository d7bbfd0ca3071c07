package firestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	gfs "cloud.google.com/go/firestore"
	"google.golang.org/api/iterator"

	"github.com/leasesvc/leasesvc/backend"
)

var _ backend.ExpiryScanner = (*Store)(nil)

// ScanExpiry implements backend.ExpiryScanner with one query:
// expireTime ≤ until, ordered by expireTime then document ID, starting after
// the cursor. The range filter and the order on expireTime are served by
// Firestore's automatic single-field index on expireTime (with the document
// ID appended, as Firestore appends it to every index), so it needs no
// composite index, but expireTime must not be exempted from single-field
// indexing. Cost: one document read per row returned (one for a query
// that matches nothing).
func (s *Store) ScanExpiry(ctx context.Context, after backend.Cursor, until time.Time, limit int) ([]backend.Row, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("backend/firestore: scan expiry: limit %d must be positive", limit)
	}
	q := s.coll.Where(fieldExpireTime, "<=", storedTime(until)).
		OrderBy(fieldExpireTime, gfs.Asc).OrderBy(gfs.DocumentID, gfs.Asc).Limit(limit)
	switch {
	case after.Name != "":
		q = q.StartAfter(storedTime(after.ExpireTime), after.Name)
	case !after.ExpireTime.IsZero():
		// Every name sorts after "": the records at or after the time.
		q = q.Where(fieldExpireTime, ">=", storedTime(after.ExpireTime))
	}
	call, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	it := q.Documents(call)
	defer it.Stop()
	var out []backend.Row
	for {
		ds, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, classify(ctx, call, "scan expiry", until.UTC().Format(time.RFC3339Nano), err)
		}
		r, err := fromSnapshot(ds)
		if err != nil {
			return nil, err
		}
		out = append(out, *r)
	}
}
