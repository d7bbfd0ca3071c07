package backendtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// testScanExpiry checks the expiry scan the sweeper relies on: order by
// (ExpireTime, Name), the cursor is exclusive, until is inclusive, and limit
// pages. The records expire in 2100, where no other test writes.
func testScanExpiry(t *testing.T, e *env) {
	sc, ok := e.Store.(backend.ExpiryScanner)
	if !ok {
		t.Fatalf("%T does not implement backend.ExpiryScanner; the expiry sweeper needs it", e.Store)
	}
	t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(time.Now().UnixNano()%1e6) * time.Second)
	recs := map[string]time.Duration{"d": 3 * time.Second, "c": 2 * time.Second, "a": time.Second, "b": 2 * time.Second}
	written := map[string]*lease.Record{}
	for n, d := range recs {
		r := sampleRecord(e.name(n), t0)
		if n == "b" {
			r = plainRecord(e.name(n), t0) // no succession state
		}
		r.AcquireTime, r.RenewTime, r.ExpireTime = t0, t0, t0.Add(d)
		r.TTL = d
		put(t, e.recs, r)
		written[r.Name] = r
	}
	scan := func(after backend.Cursor, until time.Time, limit int) string {
		t.Helper()
		got, err := lease.ScanExpiry(t.Context(), sc, after, until, limit)
		if err != nil {
			t.Fatalf("ScanExpiry: %v", err)
		}
		var names []string
		for _, r := range got {
			if !strings.HasPrefix(r.Name, e.prefix) {
				t.Fatalf("ScanExpiry(after %v, until %v) returned %s, expiring %v", after.ExpireTime, until, r.Name, r.ExpireTime)
			}
			names = append(names, r.Name[len(e.prefix):])
			if d := recordDiff(written[r.Name], &r); d != "" {
				t.Errorf("ScanExpiry returned %s different from what was written (-want +got):\n%s", r.Name, d)
			}
		}
		return fmt.Sprint(names)
	}
	start := backend.Cursor{ExpireTime: t0}
	cases := []struct {
		after backend.Cursor
		until time.Time
		limit int
		want  string
	}{
		{start, t0.Add(10 * time.Second), 100, "[a b c d]"},
		{start, t0.Add(10 * time.Second), 2, "[a b]"},
		{backend.Cursor{ExpireTime: t0.Add(2 * time.Second), Name: e.name("b")}, t0.Add(10 * time.Second), 100, "[c d]"},
		{backend.Cursor{ExpireTime: t0.Add(time.Second), Name: e.name("a")}, t0.Add(2 * time.Second), 100, "[b c]"},
		{start, t0.Add(time.Second - time.Microsecond), 100, "[]"},
		{backend.Cursor{ExpireTime: t0.Add(3 * time.Second), Name: e.name("d")}, t0.Add(10 * time.Second), 100, "[]"},
	}
	for _, c := range cases {
		if got := scan(c.after, c.until, c.limit); got != c.want {
			t.Errorf("ScanExpiry(after %v/%s, until +%v, limit %d) = %s, want %s",
				c.after.ExpireTime.Sub(t0), c.after.Name, c.until.Sub(t0), c.limit, got, c.want)
		}
	}
}
