package proofkey

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// errKept: a key record is no longer past the retention (it was renewed
// since the scan): the prune leaves it.
var errKept = errors.New("proofkey: key record within the retention")

// Prune removes from the backend every key record that ended (its expiry
// passed) at least the retention ago, this instance's own excepted: the
// record becomes a tombstone (lease.Tombstone) that keeps no key, as a
// deleted lease's does, so its public key is gone and no instance lists it
// again. It returns how many records it removed. Each removal decides on
// the record as it is then, so a record renewed since the scan, and one
// another instance removed first, are left as they are; instances may
// prune at once. Run calls it every renewal; the backend's clock decides.
func (i *Issuer) Prune(ctx context.Context) (int, error) {
	var past []string
	for after := ""; ; {
		rows, now, err := i.loop.List(ctx, lease.KeyRecordPrefix, after, listPage)
		if err != nil {
			return 0, fmt.Errorf("proofkey: list key records: %w", err)
		}
		for _, row := range rows {
			r, err := lease.DecodeRow(row)
			if err != nil {
				return 0, err
			}
			if i.expired(r, now) {
				past = append(past, r.Name)
			}
		}
		if len(rows) < listPage {
			break
		}
		after = rows[len(rows)-1].Name
	}
	n := 0
	for _, name := range past {
		_, err := lease.UpdateWith(ctx, i.loop.Update, name, func(cur lease.Snapshot) (*lease.Record, error) {
			r := cur.Record
			if !i.expired(r, cur.ServerTime) {
				return nil, errKept
			}
			return &lease.Record{Name: r.Name, FencingToken: r.FencingToken, Transitions: r.Transitions, TTL: r.TTL,
				AcquireTime: r.AcquireTime, RenewTime: r.RenewTime, ExpireTime: r.ExpireTime, DeleteTime: cur.ServerTime}, nil
		})
		switch {
		case errors.Is(err, errKept):
		case err != nil:
			return n, fmt.Errorf("proofkey: remove key record %s: %w", name, err)
		default:
			n++
		}
	}
	return n, nil
}

// expired reports whether r is a key record other than this instance's
// own that ended at least the retention before now.
func (i *Issuer) expired(r *lease.Record, now time.Time) bool {
	return r != nil && !lease.Tombstone(r) && r.Name != lease.KeyRecordPrefix+i.kid &&
		!now.Before(r.ExpireTime.Add(i.cfg.Retention))
}
