package postgres

import (
	"context"
	_ "embed" // schema.sql
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
)

func init() {
	backend.Register(backend.Opener{
		Name:    "postgres",
		Summary: "PostgreSQL (Cloud SQL, AlloyDB): one row per lease; clock_timestamp() after the row lock decides",
		Settings: []backend.Setting{
			{Env: "LEASESVC_POSTGRES_URL", Usage: "libpq connection URL, e.g. `postgres://user@host:5432/db?sslmode=require` (a password may come from `PGPASSWORD`; `pool_max_conns`, default 20, sizes the pool)"},
			{Env: "LEASESVC_POSTGRES_BATCH_MAX", Default: "`1` (off)", Usage: "`1`–`1000`: how many acquires, renews and releases of distinct leases that arrive while a transaction is in flight share the next one ([docs/backends.md](docs/backends.md#batching))"},
			{Env: "LEASESVC_POSTGRES_MIGRATE", Default: "`false`", Usage: "`true` creates the `leasesvc_leases` table and its expiry index if missing, and adds the columns of a table created by an older version; the columns are always checked at start-up"},
		},
		Open: open,
	})
}

// schema creates the table and its index when missing (schema.sql).
//
//go:embed schema.sql
var schema string

// startTimeout bounds the start-up calls, so that a database that does not
// answer is named within seconds.
const startTimeout = 5 * time.Second

func open(ctx context.Context, getenv func(string) string, _ backend.OpenOptions) (backend.Opened, error) {
	url := getenv("LEASESVC_POSTGRES_URL")
	if url == "" {
		return backend.Opened{}, errors.New("LEASESVC_POSTGRES_URL is required with LEASESVC_BACKEND=postgres: postgres://USER@HOST:PORT/DATABASE")
	}
	migrate, err := backend.EnvBool(getenv, "LEASESVC_POSTGRES_MIGRATE", false)
	if err != nil {
		return backend.Opened{}, err
	}
	batchMax, err := envBatchMax(getenv)
	if err != nil {
		return backend.Opened{}, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return backend.Opened{}, fmt.Errorf("LEASESVC_POSTGRES_URL: %w", err) // pgx never echoes the password
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgx's default, 4 on a small machine, would be one listener and 3
		// requests at a time.
		cfg.MaxConns = 20
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return backend.Opened{}, fmt.Errorf("LEASESVC_POSTGRES_URL: %w", err)
	}
	s := New(pool, WithBatchMax(batchMax))
	start, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if migrate {
		err = s.Migrate(start)
	}
	if err == nil {
		err = s.CheckSchema(start)
	}
	if err != nil {
		pool.Close()
		return backend.Opened{}, fmt.Errorf("postgres at %s:%d, database %q (within %v): %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, startTimeout, err)
	}
	// One batcher for every Loop the service builds over s (its
	// lease.Manager's and its proof-key issuer's).
	return backend.Opened{Store: s, Loop: []backend.LoopOption{backend.WithBatcher(backend.NewBatcher())}, Close: func() error { pool.Close(); return nil }}, nil
}

// envBatchMax reads LEASESVC_POSTGRES_BATCH_MAX: 1–BatchMaxLimit, unset
// DefaultBatchMax.
func envBatchMax(getenv func(string) string) (int, error) {
	return backend.EnvBatchMax(getenv, "LEASESVC_POSTGRES_BATCH_MAX", DefaultBatchMax, BatchMaxLimit)
}

// Migrate creates the table and its index (schema.sql) when missing, one
// instance at a time. Of an existing table it only adds the columns that
// later versions added (ADD COLUMN IF NOT EXISTS, with a default, so rows
// written before read as they did).
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err == nil {
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('"+table+"'))"); err == nil {
			_, err = tx.Exec(ctx, schema)
		}
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return fmt.Errorf("LEASESVC_POSTGRES_MIGRATE=true: create or migrate table %s: %w", table, err)
	}
	return nil
}

// CheckSchema checks that the table has every column the Store uses.
func (s *Store) CheckSchema(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "SELECT "+columns+" FROM "+table+" LIMIT 0"); err != nil {
		return fmt.Errorf("table %s with columns %s: %w (create it from backend/postgres/schema.sql, or set LEASESVC_POSTGRES_MIGRATE=true)", table, columns, err)
	}
	return nil
}
