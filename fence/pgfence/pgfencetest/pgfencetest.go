// Package pgfencetest holds what the Python and TypeScript helpers' tests
// compare with the Go helper (fence/pgfence): they must make the same
// token table.
package pgfencetest

import (
	"encoding/json"
	"testing"

	"github.com/leasesvc/leasesvc/fence/pgfence"
)

// GoSchemas is pgfence.Schema of a few table names (the default, a plain
// one, one that needs quoting and one with a NUL), as a JSON object by
// name, for the other languages' helpers to compare theirs with
// (LEASESVC_PGFENCE_GO_SCHEMAS).
func GoSchemas(t testing.TB) string {
	t.Helper()
	m := map[string]string{}
	for _, table := range []string{"", "leasesvc_fence", `Odd "quoted" 100% name`, "a\x00b"} {
		m[table] = pgfence.Schema(table)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
