package pgfence_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/fence/pgfence"
	"github.com/leasesvc/leasesvc/fence/pgfence/pgfencetest"
)

// TestPythonPgfence runs the Python helper's suite (sdk/python/tests/
// test_pgfence.py, with psycopg2) on a throwaway PostgreSQL whose token
// table Go created and where Go already fenced a resource at token 5: the
// Python suite refuses token 4 there, writes with 5 and fences first with
// 6 (proofs Go signed, LEASESVC_PGFENCE_GO); then Go refuses its own token
// 5 (stale) and reads Python's row. Every Python test must run, none skip.
func TestPythonPgfence(t *testing.T) {
	t.Parallel()
	py := pythonWithPsycopg2(t)
	cl := pgtest.Start(t)
	ctx := t.Context()
	db, err := pgxpool.New(ctx, cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{pgfence.Schema(""), `CREATE TABLE py_items (id text PRIMARY KEY)`} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	s := newSigner(t)
	f, err := pgfence.New(db, s.v, "")
	if err != nil {
		t.Fatal(err)
	}
	const lease, resource = "team-a.scheduler", "go_orders_table"
	if _, err := f.Write(ctx, lease, resource, s.proof(lease, 5), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO py_items VALUES ($1)`, resource+"/go-5")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	proofs := map[string]string{}
	for _, n := range []int64{4, 5, 6} {
		proofs[strconv.FormatInt(n, 10)] = s.proof(lease, n)
	}
	pub := fence.NewJWK(s.priv.Public().(ed25519.PublicKey))
	interop, err := json.Marshal(map[string]any{"jwks": fence.JWKS{Keys: []fence.JWK{pub}}, "lease": lease, "resource": resource, "proofs": proofs})
	if err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, py, "-m", "unittest", "-v", "tests.test_pgfence")
	cmd.Dir = filepath.Join(repoRoot(t), "sdk", "python")
	cmd.Env = append(os.Environ(), "LEASESVC_PG_URL="+cl.URL, "LEASESVC_PGFENCE_GO_SCHEMAS="+pgfencetest.GoSchemas(t), "LEASESVC_PGFENCE_GO="+string(interop))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest tests.test_pgfence: %v\n%s", py, err, out)
	}
	t.Logf("%s", out)
	if strings.Contains(string(out), "skipped") || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("the Python suite skipped tests or did not pass:\n%s", out)
	}

	var token int64
	if err := db.QueryRow(ctx, `SELECT fencing_token FROM leasesvc_fence WHERE resource = $1`, resource).Scan(&token); err != nil || token != 6 {
		t.Fatalf("after Python: stored token %d (%v), want 6", token, err)
	}
	if _, err := f.Write(ctx, lease, resource, s.proof(lease, 5), nil); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Go's token 5 after Python fenced with 6: %v, want stale", err)
	}
	rows, _ := db.Query(ctx, `SELECT id FROM py_items WHERE id LIKE $1 ORDER BY id`, resource+"/%")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(ids, " ") != resource+"/go-5 "+resource+"/python-5" {
		t.Fatalf("rows %v (%v), want Go's and Python's", ids, err)
	}
}
