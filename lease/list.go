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
}

// ListResult is one page of leases.
type ListResult struct {
	// Leases are in ascending name order; never nil.
	Leases []Lease
	// NextPageToken continues the list; "" when this is the last page.
	NextPageToken string
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
	after, ok := decodePageToken(req.PageToken, req.Prefix)
	if !ok {
		v.add("pageToken", "is malformed or belongs to a list with another prefix")
	}
	if err := v.err(); err != nil {
		return ListResult{}, err
	}
	recs, now, err := m.loop.List(ctx, req.Prefix, after, size+1)
	if err != nil {
		return ListResult{}, opError("list", req.Prefix, err)
	}
	res := ListResult{Leases: make([]Lease, 0, min(len(recs), size))}
	now = now.Truncate(time.Microsecond)
	for i := range recs {
		if i == size {
			res.NextPageToken = encodePageToken(req.Prefix, recs[i-1].Name)
			break
		}
		res.Leases = append(res.Leases, view(&recs[i], now))
	}
	return res, nil
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
