package spanner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"google.golang.org/api/iterator"

	"github.com/leasesvc/leasesvc/backend"
)

func init() {
	backend.Register(backend.Opener{
		Name:    "spanner",
		Summary: "Cloud Spanner: one row per lease; CURRENT_TIMESTAMP() in the read-write transaction decides",
		Settings: []backend.Setting{
			{Env: "LEASESVC_SPANNER_DATABASE", Usage: "`projects/P/instances/I/databases/D`"},
			{Env: "LEASESVC_SPANNER_MIGRATE", Default: "`false`", Usage: "`true` creates the `Leases` table and its index if missing (needs `roles/spanner.databaseAdmin`); the schema is always checked at start-up and never altered silently"},
			{Env: "LEASESVC_SPANNER_FAST_PATH", Default: "`adaptive`", Usage: "`adaptive`, `always`, `never`: when a refusal is answered from a lock-free strong read ([docs/spanner.md](docs/spanner.md))"},
			{Env: "LEASESVC_SPANNER_BATCH_MAX", Default: "`100`", Usage: "`1`–`1000`: how many acquires, renews and releases of distinct leases that arrive while a read-write transaction is in flight share the next one; `1` turns batching off ([docs/spanner.md](docs/spanner.md#batching))"},
			{Env: "LEASESVC_SPANNER_MAX_COMMIT_DELAY", Default: "`0` (off)", Usage: "`0`–`500ms`: throughput-optimized writes, Spanner may delay each commit by up to this to group commits; trades write latency for throughput ([docs/spanner.md](docs/spanner.md#throughput-optimized-writes))"},
		},
		Open: open,
	})
}

// Start-up bounds.
const (
	// reachTimeout bounds the first call to Spanner, so that an endpoint
	// that does not answer is named within seconds.
	reachTimeout = 5 * time.Second
	// schemaTimeout bounds the schema check (and creation).
	schemaTimeout = time.Minute
)

// open opens the Spanner backend configured by the environment
// (SPANNER_EMULATOR_HOST is honoured: the Store then runs one read-write
// transaction at a time, as the emulator does). It checks that Spanner
// answers and the table against schema.sql before it returns, so an
// unreachable endpoint, a missing database or a different schema stops the
// service at start-up with what is wrong.
func open(ctx context.Context, getenv func(string) string, o backend.OpenOptions) (backend.Opened, error) {
	db := getenv("LEASESVC_SPANNER_DATABASE")
	if db == "" {
		return backend.Opened{}, errors.New("LEASESVC_SPANNER_DATABASE is required with LEASESVC_BACKEND=spanner: projects/PROJECT/instances/INSTANCE/databases/DATABASE")
	}
	if err := CheckDatabaseName(db); err != nil {
		return backend.Opened{}, fmt.Errorf("LEASESVC_SPANNER_DATABASE=%q: %w", db, err)
	}
	migrate, err := backend.EnvBool(getenv, "LEASESVC_SPANNER_MIGRATE", false)
	if err != nil {
		return backend.Opened{}, err
	}
	fastPath := FastPathAdaptive
	if v := getenv("LEASESVC_SPANNER_FAST_PATH"); v != "" {
		if fastPath, err = ParseFastPath(v); err != nil {
			return backend.Opened{}, fmt.Errorf("LEASESVC_SPANNER_FAST_PATH=%q: must be adaptive, always or never", v)
		}
	}
	commitDelay, err := envMaxCommitDelay(getenv)
	if err != nil {
		return backend.Opened{}, err
	}
	batchMax, err := envBatchMax(getenv)
	if err != nil {
		return backend.Opened{}, err
	}
	endpoint := "spanner.googleapis.com:443"
	if h := getenv("SPANNER_EMULATOR_HOST"); h != "" {
		endpoint = h + " (SPANNER_EMULATOR_HOST)"
	}
	client, err := newClient(ctx, db)
	if err != nil {
		return backend.Opened{}, fmt.Errorf("spanner client for %s at %s: %w", db, endpoint, err)
	}
	if err := reach(ctx, client, db, endpoint); err != nil {
		client.Close()
		return backend.Opened{}, err
	}
	if err := prepareSchema(ctx, client, migrate); err != nil {
		client.Close()
		return backend.Opened{}, err
	}
	store, err := New(client, WithMaxCommitDelay(commitDelay), WithBatchMax(batchMax))
	if err != nil {
		client.Close()
		return backend.Opened{}, err
	}
	return backend.Opened{Store: store, Loop: loopOptions(store, fastPath, getenv("SPANNER_EMULATOR_HOST") != "", o.OnRetry), Close: func() error {
		if attempts, txns, splits := store.BatchStats(); attempts > 0 {
			cmp.Or(o.Logger, slog.Default()).Info("spanner: batched attempts", "attempts", attempts, "transactions", txns, "splits", splits,
				"attempts_per_transaction", float64(attempts)/float64(txns))
		}
		client.Close()
		return nil
	}}, nil
}

// loopOptions are the service's settings for the Loop over s: the read-first
// mode of LEASESVC_SPANNER_FAST_PATH, one read-write transaction at a time
// on the emulator (which runs one at a time and fails the one a newcomer
// interrupts), each retry counted (Retries) and reported to onRetry, and
// one batcher for every Loop the service builds over s (its lease.Manager's
// and its proof-key issuer's), so that one transaction at a time leaves the
// process for s.
func loopOptions(s *Store, fastPath FastPath, emulator bool, onRetry func(reason string)) []backend.LoopOption {
	return []backend.LoopOption{backend.WithReadFirst(fastPath), backend.WithOneAtATime(emulator), backend.WithRetryHook(s.countRetries(onRetry)),
		backend.WithBatcher(backend.NewBatcher())}
}

// envBatchMax reads LEASESVC_SPANNER_BATCH_MAX: 1–BatchMaxLimit, unset
// DefaultBatchMax.
func envBatchMax(getenv func(string) string) (int, error) {
	return backend.EnvBatchMax(getenv, "LEASESVC_SPANNER_BATCH_MAX", DefaultBatchMax, BatchMaxLimit)
}

// envMaxCommitDelay reads LEASESVC_SPANNER_MAX_COMMIT_DELAY: a duration
// of 0–500ms (unset or 0: off).
func envMaxCommitDelay(getenv func(string) string) (time.Duration, error) {
	v := getenv("LEASESVC_SPANNER_MAX_COMMIT_DELAY")
	if v == "" || v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxCommitDelayLimit {
		return 0, fmt.Errorf("LEASESVC_SPANNER_MAX_COMMIT_DELAY=%q: must be a duration from 0 to %v, e.g. 100ms", v, MaxCommitDelayLimit)
	}
	return d, nil
}

// newClient creates the client within reachTimeout: creating its session
// is a call to Spanner.
func newClient(ctx context.Context, db string) (*spanner.Client, error) {
	type result struct {
		c   *spanner.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := spanner.NewClient(context.WithoutCancel(ctx), db)
		done <- result{c, err}
	}()
	t := time.NewTimer(reachTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.c, r.err
	case <-t.C:
		go func() { // release it if it ever comes
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("no answer within %v", reachTimeout)
	}
}

// reach runs SELECT 1 within reachTimeout and says what it could not reach.
func reach(ctx context.Context, client *spanner.Client, db, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	it := client.Single().Query(ctx, spanner.Statement{SQL: "SELECT 1"})
	defer it.Stop()
	_, err := it.Next()
	if err == nil || errors.Is(err, iterator.Done) {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("spanner at %s did not answer within %v (database %s): %w", endpoint, reachTimeout, db, err)
	}
	return fmt.Errorf("spanner at %s, database %s: %w", endpoint, db, err)
}

// prepareSchema creates the Leases table if migrate is set and it is
// missing, and checks it against schema.sql in any case.
func prepareSchema(ctx context.Context, client *spanner.Client, migrate bool) error {
	ctx, cancel := context.WithTimeout(ctx, schemaTimeout)
	defer cancel()
	if !migrate {
		err := CheckSchema(ctx, client)
		if errors.Is(err, ErrNoTable) {
			return fmt.Errorf("%w: create it from backend/spanner/schema.sql, or set LEASESVC_SPANNER_MIGRATE=true", err)
		}
		return err
	}
	admin, err := database.NewDatabaseAdminClient(ctx)
	if err != nil {
		return fmt.Errorf("spanner database admin client: %w", err)
	}
	defer func() { _ = admin.Close() }()
	if _, err := Migrate(ctx, admin, client); err != nil {
		return fmt.Errorf("LEASESVC_SPANNER_MIGRATE=true: %w", err)
	}
	return nil
}

// Rules of the parts of a database name.
var (
	projectRE  = regexp.MustCompile(`^([a-z][a-z0-9.-]*[a-z0-9]:)?[a-z][a-z0-9-]*[a-z0-9]$`)
	instanceRE = regexp.MustCompile(`^[a-z][a-z0-9-]*[a-z0-9]$`)
	databaseRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*[a-z0-9]$`)
)

// CheckDatabaseName checks a full database name,
// projects/PROJECT/instances/INSTANCE/databases/DATABASE, and names the
// part that breaks its rules: a project ID of 6–30 characters (optionally
// domain-scoped, example.com:p), an instance ID of 2–64 characters of
// [a-z0-9-], a database ID of 2–30 characters of [a-z0-9_-], each starting
// with a letter and ending with a letter or digit.
func CheckDatabaseName(name string) error {
	const want = "want projects/PROJECT/instances/INSTANCE/databases/DATABASE"
	if name == "" {
		return errors.New("required with LEASESVC_BACKEND=spanner: " + want)
	}
	p := strings.Split(name, "/")
	if len(p) != 6 || p[0] != "projects" || p[2] != "instances" || p[4] != "databases" {
		return fmt.Errorf("%d parts separated by \"/\": %s", len(p), want)
	}
	project := p[1][strings.LastIndex(p[1], ":")+1:]
	for _, c := range []struct {
		what, id string
		min, max int
		re       *regexp.Regexp
		chars    string
	}{
		{"project ID", project, 6, 30, projectRE, "[a-z0-9-]"},
		{"instance ID", p[3], 2, 64, instanceRE, "[a-z0-9-]"},
		{"database ID", p[5], 2, 30, databaseRE, "[a-z0-9_-]"},
	} {
		id := c.id
		if c.what == "project ID" {
			id = p[1]
		}
		switch {
		case len(c.id) < c.min:
			return fmt.Errorf("%s %q is too short: %d–%d characters", c.what, c.id, c.min, c.max)
		case len(c.id) > c.max:
			return fmt.Errorf("%s %q is too long: %d–%d characters", c.what, c.id, c.min, c.max)
		case !c.re.MatchString(id):
			return fmt.Errorf("%s %q: characters of %s, starting with a letter and ending with a letter or digit", c.what, id, c.chars)
		}
	}
	return nil
}
