package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"

	"github.com/leasesvc/leasesvc/backend"
	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
)

// spannerDatabaseRE matches a full Spanner database name: a project id
// (domain-scoped ids such as example.com:p included), an instance id of 2–64
// characters and a database id of 2–30 characters.
var spannerDatabaseRE = regexp.MustCompile(`^projects/[a-z][a-z0-9.:-]*[a-z0-9]/instances/[a-z][a-z0-9-]{0,62}[a-z0-9]/databases/[a-z][a-z0-9_-]{0,28}[a-z0-9]$`)

// spannerSchemaTimeout bounds the schema check (and creation) at start-up.
const spannerSchemaTimeout = time.Minute

// openSpanner opens the Spanner backend configured by the environment
// (LEASESVC_SPANNER_DATABASE, LEASESVC_SPANNER_MIGRATE; SPANNER_EMULATOR_HOST
// is honoured). The returned close function releases the client.
//
//   - LEASESVC_SPANNER_DATABASE: projects/P/instances/I/databases/D, required.
//   - LEASESVC_SPANNER_MIGRATE: true creates the Leases table of schema.sql
//     when missing; default false. An existing table is never altered.
//   - LEASESVC_SPANNER_FAST_PATH: adaptive | always | never, when to answer
//     refusals from a strong read before the read-write transaction; default
//     adaptive (see spanner.FastPath).
//
// With SPANNER_EMULATOR_HOST set, the store runs one read-write
// transaction at a time (WithSerialTransactions), as the emulator does. It
// checks the table against schema.sql before it returns, so a missing or
// different schema stops the service at start-up.
func openSpanner(ctx context.Context, getenv func(string) string, onRetry func(reason string)) (backend.Store, func() error, error) {
	db := getenv("LEASESVC_SPANNER_DATABASE")
	switch {
	case db == "":
		return nil, nil, errors.New("LEASESVC_SPANNER_DATABASE is required with LEASESVC_BACKEND=spanner: projects/PROJECT/instances/INSTANCE/databases/DATABASE")
	case !spannerDatabaseRE.MatchString(db):
		return nil, nil, fmt.Errorf("LEASESVC_SPANNER_DATABASE=%q: want projects/PROJECT/instances/INSTANCE/databases/DATABASE", db)
	}
	migrate, err := spannerEnvBool(getenv, "LEASESVC_SPANNER_MIGRATE", false)
	if err != nil {
		return nil, nil, err
	}
	fastPath := spannerstore.FastPathAdaptive
	if v := getenv("LEASESVC_SPANNER_FAST_PATH"); v != "" {
		if fastPath, err = spannerstore.ParseFastPath(v); err != nil {
			return nil, nil, fmt.Errorf("LEASESVC_SPANNER_FAST_PATH=%q: must be adaptive, always or never", v)
		}
	}

	client, err := spanner.NewClient(ctx, db)
	if err != nil {
		return nil, nil, fmt.Errorf("spanner client for %s: %w", db, err)
	}
	if err := prepareSpannerSchema(ctx, client, migrate); err != nil {
		client.Close()
		return nil, nil, err
	}
	store, err := spannerstore.New(client,
		spannerstore.WithFastPath(fastPath),
		spannerstore.WithSerialTransactions(getenv("SPANNER_EMULATOR_HOST") != ""),
		spannerstore.WithRetryHook(onRetry))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return store, func() error { client.Close(); return nil }, nil
}

// prepareSpannerSchema creates the Leases table if migrate is set and it is
// missing, and checks it against schema.sql in any case.
func prepareSpannerSchema(ctx context.Context, client *spanner.Client, migrate bool) error {
	ctx, cancel := context.WithTimeout(ctx, spannerSchemaTimeout)
	defer cancel()
	if !migrate {
		err := spannerstore.CheckSchema(ctx, client)
		if errors.Is(err, spannerstore.ErrNoTable) {
			return fmt.Errorf("%w: create it from backend/spanner/schema.sql, or set LEASESVC_SPANNER_MIGRATE=true", err)
		}
		return err
	}
	admin, err := database.NewDatabaseAdminClient(ctx)
	if err != nil {
		return fmt.Errorf("spanner database admin client: %w", err)
	}
	defer func() { _ = admin.Close() }()
	if _, err := spannerstore.Migrate(ctx, admin, client); err != nil {
		return fmt.Errorf("LEASESVC_SPANNER_MIGRATE=true: %w", err)
	}
	return nil
}

// spannerEnvBool reads a boolean variable ("true"/"false", as strconv.ParseBool
// reads it); unset is def. An error names the variable.
func spannerEnvBool(getenv func(string) string, key string, def bool) (bool, error) {
	v := getenv(key)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: must be true or false", key, v)
	}
	return b, nil
}
