package lease

import (
	"context"
	"encoding/base64"
	"strings"
	"time"
)

// Page sizes of list (docs/contract.md §3).
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// DefaultScanBudget is how many leases that Keep refuses one page
	// passes over, at most, unless ListRequest.ScanBudget says otherwise.
	DefaultScanBudget = 10000
)

// ListRequest asks for a page of leases in name order.
type ListRequest struct {
	// Prefix keeps only the names that start with it ("" keeps all).
	Prefix string
	// PageSize is the most leases to return: 0 means DefaultPageSize and
	// larger than MaxPageSize means MaxPageSize.
	PageSize int
	// PageToken continues a previous list with the same Prefix; "" starts.
	PageToken string
	// Keep, if set, says which leases the page may show (those the caller
	// may read): a page passes over the others, reading on until it has
	// PageSize leases and knows whether one to show follows, the list
	// ends, or it has passed over ScanBudget of them. So a page is short,
	// or carries a NextPageToken that leads to nothing, only when the
	// budget ran out; such a page may be empty. Nil keeps every lease.
	Keep func(name string) bool
	// ScanBudget bounds how many leases Keep refuses one page passes over
	// (0 means DefaultScanBudget).
	ScanBudget int
}

// ListResult is one page of leases.
type ListResult struct {
	// Leases are in ascending name order; never nil.
	Leases []Lease
	// NextPageToken continues the list; "" when this is the last page.
	NextPageToken string
	// PassedOver is how many leases the page passed over (Keep refused
	// them, or they were deleted): what it spent of its scan budget.
	PassedOver int
}

// pageTokenVersion starts every page token, so the format can change.
const pageTokenVersion = "v1\x00"

// List returns a page of leases whose names start with req.Prefix.
func (m *Manager) List(ctx context.Context, req ListRequest) (ListResult, error) {
	var v violations
	if !validPrefix(req.Prefix) {
		v.add("prefix", "must be empty or 1–%d characters of [A-Za-z0-9._-] starting with a letter or digit", MaxNameLen)
	}
	size := req.PageSize
	switch {
	case size < 0:
		v.add("pageSize", "must not be negative")
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	budget := req.ScanBudget
	switch {
	case budget < 0:
		v.add("scanBudget", "must not be negative")
	case budget == 0:
		budget = DefaultScanBudget
	}
	after, ok := decodePageToken(req.PageToken, req.Prefix)
	if !ok {
		v.add("pageToken", "is malformed or belongs to a list with another prefix")
	}
	if err := v.err(); err != nil {
		return ListResult{}, err
	}
	res := ListResult{Leases: []Lease{}}
	resume := after // where the next page would start
	skipped, batch := 0, 0
	for {
		// One more than the page still needs, so that a full page knows
		// whether anything follows it; while Keep passes over leases,
		// twice as many as the last time, up to a full page.
		batch = max(size-len(res.Leases)+1, min(2*batch, MaxPageSize+1))
		recs, now, err := m.loop.List(ctx, req.Prefix, after, batch)
		if err != nil {
			return ListResult{}, opError("list", req.Prefix, err)
		}
		now = now.Truncate(time.Microsecond)
		for i := range recs {
			name := recs[i].Name
			// A tombstone (docs/contract.md §15) is passed over as a lease
			// the caller may not read is.
			keep := existing(&recs[i]) != nil && (req.Keep == nil || req.Keep(name))
			if keep && len(res.Leases) == size || !keep && skipped == budget {
				// A lease to show follows the full page, or the budget
				// ran out: the next page continues from resume.
				res.NextPageToken = encodePageToken(req.Prefix, resume)
				res.PassedOver = skipped
				return res, nil
			}
			after = name
			if keep {
				res.Leases = append(res.Leases, view(&recs[i], now))
				resume = name
				continue
			}
			skipped++
			if len(res.Leases) < size {
				resume = name // the next page need not look at it again
			}
		}
		if len(recs) < batch {
			res.PassedOver = skipped
			return res, nil // the list ended
		}
	}
}

// PageTokenAfter is the page token of the list of prefix that continues
// after the lease name: what a caller uses to end a page early.
func PageTokenAfter(prefix, name string) string { return encodePageToken(prefix, name) }

func encodePageToken(prefix, after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenVersion + prefix + "\x00" + after))
}

// decodePageToken returns the name a page starts after; ok is false for a
// token that is malformed or was made for another prefix.
func decodePageToken(tok, prefix string) (after string, ok bool) {
	if tok == "" {
		return "", true
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", false
	}
	rest, found := strings.CutPrefix(string(raw), pageTokenVersion)
	if !found {
		return "", false
	}
	p, after, found := strings.Cut(rest, "\x00")
	if !found || p != prefix || !ValidName(after) || !strings.HasPrefix(after, prefix) {
		return "", false
	}
	return after, true
}
