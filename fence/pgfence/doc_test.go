package pgfence_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestWalkthrough runs docs/fencing.md's Go and Python walkthroughs as the
// page has them, one after the other, against the real leasesvc binary and
// one throwaway PostgreSQL: each prints its steps, the deposed holder's
// late write refused as stale after the successor fenced first. Python
// continues the resource Go fenced (tokens 3 and 4 after Go's 1 and 2), so
// the table holds both languages' rows under one token sequence. (The
// TypeScript walkthrough runs in the TypeScript suite:
// sdk/typescript/test/pgfence-doc.test.ts.)
func TestWalkthrough(t *testing.T) {
	t.Parallel()
	goSource := walkthrough(t, "Go", "go")
	pySource := walkthrough(t, "Python", "python")
	py := pythonWithPsycopg2(t)
	cl := pgtest.Start(t)
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn"})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	env := append(os.Environ(), "LEASESVC_URL="+svc.URL, "DATABASE_URL="+cl.URL)

	// Go: a module of its own in a workspace with this one, so that it
	// imports the packages as a user's module does.
	dir := t.TempDir()
	files := map[string]string{
		"main.go": goSource,
		"go.mod":  "module walkthrough\n\ngo 1.26.0\n",
		"go.work": "go 1.26.0\n\nuse (\n\t.\n\t" + repoRoot(t) + "\n)\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-ldflags=-w", "-o", "walkthrough", ".") // no DWARF: half the link
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=-buildvcs=false")
	run(t, build)
	goCmd := exec.CommandContext(ctx, filepath.Join(dir, "walkthrough"))
	goCmd.Env = env
	if got, want := lines(run(t, goCmd)), steps(1); !slices.Equal(got, want) {
		t.Fatalf("the Go walkthrough printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Python, on the rows Go left.
	script := filepath.Join(t.TempDir(), "walkthrough.py")
	if err := os.WriteFile(script, []byte(pySource), 0o644); err != nil {
		t.Fatal(err)
	}
	pyCmd := exec.CommandContext(ctx, py, script)
	pyCmd.Env = append(env, "PYTHONPATH="+filepath.Join(repoRoot(t), "sdk", "python"))
	if got, want := lines(run(t, pyCmd)), steps(3); !slices.Equal(got, want) {
		t.Fatalf("the Python walkthrough printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	db, err := pgx.Connect(ctx, cl.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	var lease string
	var token int64
	if err := db.QueryRow(ctx, `SELECT lease, fencing_token FROM leasesvc_fence WHERE resource = 'orders_table'`).Scan(&lease, &token); err != nil {
		t.Fatal(err)
	}
	rows, _ := db.Query(ctx, `SELECT item || ' ' || fencing_token FROM orders ORDER BY fencing_token, item`)
	orders, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"order-1 1", "order-2 2", "order-1 3", "order-2 4"} // never an order-late
	if lease != "team-a.scheduler" || token != 4 || !slices.Equal(orders, want) {
		t.Fatalf("stored %q token %d, orders %q; want team-a.scheduler 4 and %q", lease, token, orders, want)
	}
}
