package lease_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

// TestListKeepPassesOverHidden: a page passes over the leases Keep refuses
// instead of coming back empty for them, so that paging tells a caller
// nothing of how many hidden leases there are or where they sort; only a
// page whose scan budget ran out may be short (even empty), and it then
// carries a token. Paging finds every kept lease exactly once.
func TestListKeepPassesOverHidden(t *testing.T) {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("n%02d", i))
	}
	for _, n := range names {
		if _, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: n, Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	visible := []string{"n05", "n17", "n18", "n39"}
	keep := func(n string) bool { return slices.Contains(visible, n) }

	for _, tc := range []struct {
		pageSize, budget int
		wantEmpty        int // pages that come back empty: only when the budget ran out
	}{
		{1, 0, 0},
		{2, 0, 0},
		{1, 100, 0},
		{3, 11, 1}, // n19 … n38 (20 hidden) outrun a budget of 11 once
		{1, 4, 7},  // 5, 11 and 20 hidden in a row: 1 + 2 + 4 pages end with nothing
	} {
		t.Run(fmt.Sprintf("pageSize=%d,budget=%d", tc.pageSize, tc.budget), func(t *testing.T) {
			var seen []string
			empty, tok := 0, ""
			for pages := 0; ; pages++ {
				if pages > len(names) {
					t.Fatalf("more than %d pages: the list does not end", len(names))
				}
				res, err := m.List(t.Context(), lease.ListRequest{PageSize: tc.pageSize, PageToken: tok, Keep: keep, ScanBudget: tc.budget})
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range res.Leases {
					seen = append(seen, l.Name)
				}
				if len(res.Leases) == 0 {
					empty++
					if res.NextPageToken == "" {
						t.Fatalf("page %d: empty without a token; the page before should have ended the list", pages)
					}
				}
				if tok = res.NextPageToken; tok == "" {
					break
				}
			}
			if !slices.Equal(seen, visible) {
				t.Fatalf("paged = %v, want %v", seen, visible)
			}
			if empty != tc.wantEmpty {
				t.Fatalf("%d empty pages, want %d", empty, tc.wantEmpty)
			}
		})
	}

	if _, err := m.List(t.Context(), lease.ListRequest{Keep: keep, ScanBudget: -1}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("List with a negative ScanBudget = %v, want ErrInvalid", err)
	}
	// Without Keep a page is as before: pageSize leases and a token.
	res, err := m.List(t.Context(), lease.ListRequest{PageSize: 7})
	if err != nil || len(res.Leases) != 7 || res.NextPageToken == "" {
		t.Fatalf("List without Keep = %d leases, token %q, %v; want 7 and a token", len(res.Leases), res.NextPageToken, err)
	}
}
