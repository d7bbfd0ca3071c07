package httpapi

import (
	"net/http"

	"github.com/leasesvc/leasesvc/lease"
)

// Sizes of the lister's reads.
const (
	// chunkBytes is about how much of the leases' metadata and checkpoints
	// one read of the Manager brings into memory.
	chunkBytes = 1 << 20
	// firstChunk is the size of the first read, before any lease's size
	// is known: 32 leases of the largest (16 KiB of metadata and of
	// checkpoint) are 1 MiB.
	firstChunk = 32
	// leaseBytes is what a lease costs besides its metadata and
	// checkpoint, as chunk sizes reckon it.
	leaseBytes = 512
)

// lister reads the leases of a list from the Manager in chunks of about
// chunkBytes, however many leases are wanted, so that a list page or a
// prefix stream's snapshot holds one chunk in memory at a time while it
// waits for its client, not the whole of a large prefix.
type lister struct {
	a    *api
	r    *http.Request
	req  lease.ListRequest // its PageToken is where the next read starts
	left int               // leases still to read; < 0 when unbounded
	size int               // the next read's size
	done bool
}

// newLister reads the leases under prefix from the start (PageToken of
// req) on, at most max of them (max < 0: all).
func (a *api) newLister(r *http.Request, req lease.ListRequest, max int) *lister {
	return &lister{a: a, r: r, req: req, left: max, size: firstChunk}
}

// next returns the next chunk of leases, in name order; none, with done
// set, when there are no more (an empty chunk may come before the end).
func (l *lister) next() ([]lease.Lease, error) {
	if l.done || l.left == 0 {
		l.done = true
		return nil, nil
	}
	n := l.size
	if l.left > 0 {
		n = min(n, l.left)
	}
	req := l.req
	req.PageSize = n
	ctx, cancel := l.a.timeout(l.r, 0)
	defer cancel()
	res, err := l.a.m.List(ctx, req)
	if err != nil {
		return nil, err
	}
	if l.left > 0 {
		l.left -= len(res.Leases)
	}
	l.req.PageToken = res.NextPageToken
	if l.left > 0 { // a page's reads share one scan budget
		if l.req.ScanBudget -= res.PassedOver; l.req.ScanBudget <= 0 {
			l.left = 0 // spent: the page ends here, with a token
		}
	}
	// A short chunk with a token means that lease.List's scan budget ran
	// out passing over leases it does not show: a page (a bounded read)
	// ends there too, so that one page passes over one budget of them at
	// most; a stream's snapshot (unbounded) reads on.
	l.done = res.NextPageToken == "" || l.left == 0 || l.left > 0 && len(res.Leases) < n
	if len(res.Leases) > 0 {
		total := 0
		for _, x := range res.Leases {
			total += len(x.Metadata) + len(x.Checkpoint) + leaseBytes
		}
		l.size = max(1, min(lease.MaxPageSize, chunkBytes*len(res.Leases)/total))
	}
	return res.Leases, nil
}

// after is the Manager's page token that continues after the lease name.
func (l *lister) after(name string) string { return lease.PageTokenAfter(l.req.Prefix, name) }
