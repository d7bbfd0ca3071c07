package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
)

func init() {
	backend.Register(backend.Opener{
		Name:    "postgres",
		Summary: "PostgreSQL (Cloud SQL, AlloyDB): one row per lease; clock_timestamp() after the row lock decides",
		Settings: []backend.Setting{
			{Env: "LEASESVC_POSTGRES_URL", Usage: "libpq connection URL, e.g. `postgres://user@host:5432/db?sslmode=require` (a password may come from `PGPASSWORD`)"},
			{Env: "LEASESVC_POSTGRES_MIGRATE", Default: "`false`", Usage: "`true` creates the `leasesvc_leases` table and its expiry index if missing; the columns are always checked at start-up"},
		},
		Open: open,
	})
}

// identRE matches a plain SQL identifier.
var identRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// reachTimeout bounds the start-up calls, so that a database that does not
// answer is named within seconds.
const reachTimeout = 5 * time.Second

func open(ctx context.Context, getenv func(string) string, _ backend.OpenOptions) (backend.Store, func() error, error) {
	url := getenv("LEASESVC_POSTGRES_URL")
	if url == "" {
		return nil, nil, errors.New("LEASESVC_POSTGRES_URL is required with LEASESVC_BACKEND=postgres: postgres://USER@HOST:PORT/DATABASE")
	}
	migrate, err := backend.EnvBool(getenv, "LEASESVC_POSTGRES_MIGRATE", false)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("LEASESVC_POSTGRES_URL: %w", err) // pgx never echoes the password
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("LEASESVC_POSTGRES_URL: %w", err)
	}
	s, err := New(pool)
	if err == nil {
		err = s.prepare(ctx, migrate)
	}
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("postgres at %s:%d, database %q: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	return s, func() error { pool.Close(); return nil }, nil
}

// prepare creates the schema if migrate is set, and checks it in any case.
func (s *Store) prepare(ctx context.Context, migrate bool) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	if migrate {
		if err := s.Migrate(ctx); err != nil {
			return fmt.Errorf("LEASESVC_POSTGRES_MIGRATE=true: %w", err)
		}
	}
	return s.CheckSchema(ctx)
}

// Migrate creates the table and its expiry index if they are missing. An
// existing table is never altered.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	name          text COLLATE "C" PRIMARY KEY,
	holder        text NOT NULL,
	fencing_token bigint NOT NULL,
	ttl_ms        bigint NOT NULL,
	acquire_time  timestamptz NOT NULL,
	renew_time    timestamptz NOT NULL,
	expire_time   timestamptz NOT NULL,
	transitions   bigint NOT NULL,
	metadata      text NOT NULL DEFAULT '',
	principal     text NOT NULL DEFAULT '',
	revoked_by    text NOT NULL DEFAULT '',
	revoke_reason text NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS `+s.table+`_by_expiry ON `+s.table+` (expire_time, name)`)
	if err != nil {
		return fmt.Errorf("create table %s: %w", s.table, err)
	}
	return nil
}

// CheckSchema checks that the table exists with every column the Store
// reads and writes.
func (s *Store) CheckSchema(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, "SELECT "+columns+" FROM "+s.table+" LIMIT 0")
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within %v: %w", reachTimeout, err)
		}
		return fmt.Errorf("table %s with columns %s: %w (create it with LEASESVC_POSTGRES_MIGRATE=true)", s.table, columns, err)
	}
	return nil
}
