package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	gfs "cloud.google.com/go/firestore"
	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
	"github.com/leasesvc/leasesvc/lease"
)

// direct does a lease operation's backend work directly, without the
// service: the floor that the service's latency is compared with. Each
// method is one operation as the service's backend does it for an
// uncontended lease, with the same reads and writes.
type direct interface {
	// acquire takes the free lease name for holder and returns its token.
	acquire(ctx context.Context, name, holder string, ttl time.Duration) (int64, error)
	// renew extends holder's live holding of name.
	renew(ctx context.Context, name, holder string, token int64) error
	// release ends holder's holding of name now.
	release(ctx context.Context, name, holder string, token int64) error
	close() error
}

// errDirectLost is a direct renew or release of a holding that is not
// there: the benchmark's own bug, never expected.
var errDirectLost = errors.New("direct: the holding is not live")

// openDirect returns the direct path for the configured backend, or nil
// for the memory backend, which has no backend of its own to reach.
func openDirect(ctx context.Context, c config) (direct, error) {
	switch c.backend {
	case "firestore":
		client, err := gfs.NewClientWithDatabase(ctx, c.project, c.firestoreDatabase)
		if err != nil {
			return nil, fmt.Errorf("direct: firestore client for project %q database %q: %w", c.project, c.firestoreDatabase, err)
		}
		return &firestoreDirect{c: client, coll: client.Collection(c.directCollection)}, nil
	case "spanner":
		client, err := spanner.NewClient(ctx, c.spannerDatabase)
		if err != nil {
			return nil, fmt.Errorf("direct: spanner client for %s: %w", c.spannerDatabase, err)
		}
		return &spannerDirect{c: client, db: c.spannerDatabase}, nil
	case "postgres":
		return openPostgresDirect(ctx, c.postgresURL)
	}
	return nil, nil
}

// firestoreDirect is the Firestore backend's work by hand: a plain read of
// the document (its read time is the decision time), then a Create of a
// missing document or an update of the changed fields conditioned on the
// update time read.
type firestoreDirect struct {
	c    *gfs.Client
	coll *gfs.CollectionRef
}

func (d *firestoreDirect) acquire(ctx context.Context, name, holder string, ttl time.Duration) (int64, error) {
	ref := d.coll.Doc(name)
	ds, err := ref.Get(ctx)
	if status.Code(err) != codes.NotFound {
		return 0, fmt.Errorf("direct acquire %s: want a new document, got %v", name, err)
	}
	now := ds.ReadTime.Truncate(time.Microsecond)
	_, err = ref.Create(ctx, map[string]any{
		"name": name, "holder": holder, "fencingToken": int64(1), "ttlMs": ttl.Milliseconds(),
		"acquireTime": now, "renewTime": now, "expireTime": now.Add(ttl), "transitions": int64(1), "metadata": "",
	})
	if err != nil {
		return 0, fmt.Errorf("direct acquire %s: create: %w", name, err)
	}
	return 1, nil
}

// live reads the document and checks that holder holds it with token.
func (d *firestoreDirect) live(ctx context.Context, name, holder string, token int64) (*gfs.DocumentSnapshot, time.Time, int64, error) {
	ds, err := d.coll.Doc(name).Get(ctx)
	if err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("direct %s: get: %w", name, err)
	}
	var doc struct {
		Holder       string    `firestore:"holder"`
		FencingToken int64     `firestore:"fencingToken"`
		TTLMs        int64     `firestore:"ttlMs"`
		ExpireTime   time.Time `firestore:"expireTime"`
	}
	if err := ds.DataTo(&doc); err != nil {
		return nil, time.Time{}, 0, fmt.Errorf("direct %s: decode: %w", name, err)
	}
	now := ds.ReadTime.Truncate(time.Microsecond)
	if doc.Holder != holder || doc.FencingToken != token || !now.Before(doc.ExpireTime) {
		return nil, time.Time{}, 0, fmt.Errorf("direct %s: %w", name, errDirectLost)
	}
	return ds, now, doc.TTLMs, nil
}

func (d *firestoreDirect) renew(ctx context.Context, name, holder string, token int64) error {
	ds, now, ttlMs, err := d.live(ctx, name, holder, token)
	if err != nil {
		return err
	}
	_, err = ds.Ref.Update(ctx, []gfs.Update{{Path: "renewTime", Value: now}, {Path: "expireTime", Value: now.Add(time.Duration(ttlMs) * time.Millisecond)}},
		gfs.LastUpdateTime(ds.UpdateTime))
	if err != nil {
		return fmt.Errorf("direct renew %s: update: %w", name, err)
	}
	return nil
}

func (d *firestoreDirect) release(ctx context.Context, name, holder string, token int64) error {
	ds, now, _, err := d.live(ctx, name, holder, token)
	if err != nil {
		return err
	}
	if _, err := ds.Ref.Update(ctx, []gfs.Update{{Path: "expireTime", Value: now}}, gfs.LastUpdateTime(ds.UpdateTime)); err != nil {
		return fmt.Errorf("direct release %s: update: %w", name, err)
	}
	return nil
}

func (d *firestoreDirect) close() error {
	if err := d.c.Close(); err != nil {
		return fmt.Errorf("direct: close firestore client: %w", err)
	}
	return nil
}

// spannerDirect is the Spanner backend's work by hand: one read-write
// transaction that reads the row with CURRENT_TIMESTAMP(), decides, and
// buffers the write of the whole row, with the Store's own reads and writes
// (spannerstore.ReadForUpdate, spannerstore.Mutation) so the two cannot
// drift apart.
type spannerDirect struct {
	c  *spanner.Client
	db string

	once       sync.Once // creates the minimal transaction's table
	minimalErr error
}

// update runs one read-write transaction: decide gets the time and the
// record (nil when absent) and returns the record to write. The record
// goes through package lease's codec, as the service's does.
func (d *spannerDirect) update(ctx context.Context, name string, decide func(now time.Time, cur *lease.Record) (*lease.Record, error)) error {
	_, err := d.c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, now, err := spannerstore.ReadForUpdate(ctx, tx, name)
		if err != nil {
			return err
		}
		var cur *lease.Record
		if row != nil {
			if cur, err = lease.DecodeRow(*row); err != nil {
				return err
			}
		}
		next, err := decide(now.Truncate(time.Microsecond), cur)
		if err != nil {
			return err
		}
		nextRow, err := lease.EncodeRow(next)
		if err != nil {
			return err
		}
		m, err := spannerstore.Mutation(name, &nextRow)
		if err != nil {
			return err
		}
		return tx.BufferWrite([]*spanner.Mutation{m})
	})
	if err != nil {
		return fmt.Errorf("direct %s: %w", name, err)
	}
	return nil
}

func (d *spannerDirect) acquire(ctx context.Context, name, holder string, ttl time.Duration) (int64, error) {
	err := d.update(ctx, name, func(now time.Time, cur *lease.Record) (*lease.Record, error) {
		if cur != nil {
			return nil, fmt.Errorf("acquire: want a new lease, found one")
		}
		return &lease.Record{Name: name, Holder: holder, FencingToken: 1, TTL: ttl,
			AcquireTime: now, RenewTime: now, ExpireTime: now.Add(ttl), Transitions: 1}, nil
	})
	return 1, err
}

// live is the check of renew and release: holder holds it with token.
func live(now time.Time, cur *lease.Record, holder string, token int64) error {
	if cur == nil || cur.Holder != holder || cur.FencingToken != token || !now.Before(cur.ExpireTime) {
		return errDirectLost
	}
	return nil
}

func (d *spannerDirect) renew(ctx context.Context, name, holder string, token int64) error {
	return d.update(ctx, name, func(now time.Time, cur *lease.Record) (*lease.Record, error) {
		if err := live(now, cur, holder, token); err != nil {
			return nil, err
		}
		next := *cur
		next.RenewTime, next.ExpireTime = now, now.Add(cur.TTL)
		return &next, nil
	})
}

func (d *spannerDirect) release(ctx context.Context, name, holder string, token int64) error {
	return d.update(ctx, name, func(now time.Time, cur *lease.Record) (*lease.Record, error) {
		if err := live(now, cur, holder, token); err != nil {
			return nil, err
		}
		next := *cur
		next.ExpireTime = now
		return &next, nil
	})
}

func (d *spannerDirect) close() error {
	d.c.Close()
	return nil
}
