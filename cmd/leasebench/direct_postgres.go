package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// postgresDirect is the PostgreSQL backend's work by hand: one READ
// COMMITTED transaction that locks the row (SELECT … FOR UPDATE), then
// reads clock_timestamp() (both in one round trip), decides, and writes the
// whole row, then commits.
type postgresDirect struct{ pool *pgxpool.Pool }

func openPostgresDirect(ctx context.Context, url string) (direct, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("direct: postgres: %w", err)
	}
	return &postgresDirect{pool: pool}, nil
}

// pgRow is the part of a lease row the direct path decides on.
type pgRow struct {
	holder       string
	token, ttlMs int64
	expire       time.Time
}

// update runs one transaction: decide gets the time and the row (nil when
// absent) and returns the new row.
func (d *postgresDirect) update(ctx context.Context, name string, decide func(now time.Time, cur *pgRow) (*pgRow, error)) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("direct %s: %w", name, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &pgx.Batch{}
	b.Queue("SELECT holder, fencing_token, ttl_ms, expire_time FROM "+"leasesvc_leases"+" WHERE name = $1 FOR UPDATE", name)
	b.Queue("SELECT clock_timestamp()")
	res := tx.SendBatch(ctx, b)
	var cur pgRow
	err = res.QueryRow().Scan(&cur.holder, &cur.token, &cur.ttlMs, &cur.expire)
	found := err == nil
	var now time.Time
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		err = res.QueryRow().Scan(&now)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("direct %s: %w", name, err)
	}
	var prev *pgRow
	if found {
		prev = &cur
	}
	now = now.Truncate(time.Microsecond)
	next, err := decide(now, prev)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+"leasesvc_leases"+` (name, holder, fencing_token, ttl_ms, acquire_time, renew_time, expire_time, transitions)
VALUES ($1, $2, $3, $4, $5, $5, $6, 1) ON CONFLICT (name) DO UPDATE SET renew_time = $5, expire_time = $6`,
		name, next.holder, next.token, next.ttlMs, now, next.expire)
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return fmt.Errorf("direct %s: %w", name, err)
	}
	return nil
}

func (d *postgresDirect) acquire(ctx context.Context, name, holder string, ttl time.Duration) (int64, error) {
	err := d.update(ctx, name, func(now time.Time, cur *pgRow) (*pgRow, error) {
		if cur != nil {
			return nil, fmt.Errorf("acquire: want a new lease, found one")
		}
		return &pgRow{holder: holder, token: 1, ttlMs: ttl.Milliseconds(), expire: now.Add(ttl)}, nil
	})
	return 1, err
}

// pgLive is the check of renew and release: holder holds it with token.
func pgLive(now time.Time, cur *pgRow, holder string, token int64) error {
	if cur == nil || cur.holder != holder || cur.token != token || !now.Before(cur.expire) {
		return errDirectLost
	}
	return nil
}

func (d *postgresDirect) renew(ctx context.Context, name, holder string, token int64) error {
	return d.update(ctx, name, func(now time.Time, cur *pgRow) (*pgRow, error) {
		if err := pgLive(now, cur, holder, token); err != nil {
			return nil, err
		}
		next := *cur
		next.expire = now.Add(time.Duration(cur.ttlMs) * time.Millisecond)
		return &next, nil
	})
}

func (d *postgresDirect) release(ctx context.Context, name, holder string, token int64) error {
	return d.update(ctx, name, func(now time.Time, cur *pgRow) (*pgRow, error) {
		if err := pgLive(now, cur, holder, token); err != nil {
			return nil, err
		}
		next := *cur
		next.expire = now
		return &next, nil
	})
}

func (d *postgresDirect) close() error {
	d.pool.Close()
	return nil
}
