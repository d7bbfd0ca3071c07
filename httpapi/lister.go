package httpapi

import (
	"errors"
	"net/http"

	"github.com/leasesvc/leasesvc/internal/membudget"
	"github.com/leasesvc/leasesvc/lease"
)

// Sizes of the lister's reads.
const (
	// listChunkBytes is about how much of the leases' metadata and
	// checkpoints one read of a list page brings into memory;
	// streamChunkBytes one read of a prefix stream's snapshot, so that a
	// stream whose client does not read holds a chunk and its backlog
	// queue (backlogBytes), ≈ 128 KiB, not 1 MiB (docs/contract.md §16).
	listChunkBytes   = 256 << 10
	streamChunkBytes = 64 << 10
	// maxLeaseBytes is the most a lease costs as chunk sizes reckon it:
	// its metadata and checkpoint at their largest, and leaseBytes.
	maxLeaseBytes = lease.MaxMetadataBytes + lease.MaxCheckpointBytes + leaseBytes
	// leaseBytes is what a lease costs besides its metadata and
	// checkpoint, as chunk sizes reckon it.
	leaseBytes = 512
)

// streamChunk is the chunk a prefix stream's snapshot reads: at least one
// lease of the largest.
func (a *api) streamChunk() int { return max(streamChunkBytes, maxLeaseBytes) }

// lister reads the leases of a list from the Manager in chunks of about
// chunk bytes, however many leases are wanted, so that a list page or a
// prefix stream's snapshot holds one chunk in memory at a time while it
// waits for its client, not the whole of a large prefix. Each chunk is
// charged to acct (the memory budget, docs/contract.md §16) from the read
// that brings it to the next read or close: a chunk the budget refuses is
// dropped and next returns a *memoryError.
type lister struct {
	a     *api
	r     *http.Request
	req   lease.ListRequest // its PageToken is where the next read starts
	left  int               // leases still to read; < 0 when unbounded
	chunk int               // bytes a read aims at
	size  int               // the next read's size
	done  bool
	acct  *membudget.Account
	held  int64 // bytes of the chunk last returned, charged to acct
}

// newLister reads the leases under prefix from the start (PageToken of
// req) on, at most max of them (max < 0: all), chunk bytes at a time,
// charging each chunk to acct. The caller must call close.
func (a *api) newLister(r *http.Request, req lease.ListRequest, max, chunk int, acct *membudget.Account) *lister {
	// The first read, before any lease's size is known, reckons each at
	// its largest, and reads two at least: a prefix of one or two leases
	// is read whole at once.
	first := chunk / maxLeaseBytes
	if first < 2 {
		first = 2
	}
	return &lister{a: a, r: r, req: req, left: max, chunk: chunk, size: first, acct: acct}
}

// chunkCost is what a chunk of leases costs in the memory budget.
func chunkCost(ls []lease.Lease) int64 {
	var n int64
	for _, x := range ls {
		n += int64(len(x.Metadata) + len(x.Checkpoint) + len(x.Name) + leaseBytes)
	}
	return n
}

// close gives back the charge of the chunk last returned.
func (l *lister) close() {
	l.acct.Shrink(l.held)
	l.held = 0
}

// next returns the next chunk of leases, in name order; none, with done
// set, when there are no more (an empty chunk may come before the end).
// The chunk returned before is given back to the budget.
func (l *lister) next() ([]lease.Lease, error) {
	l.close()
	if l.done || l.left == 0 {
		l.done = true
		return nil, nil
	}
	n := max(l.size, 1)
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
	cost := chunkCost(res.Leases)
	if !l.acct.Grow(cost) {
		return nil, &memoryError{need: cost, refusal: l.acct.Refusal()}
	}
	l.held = cost
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
		l.size = max(1, min(lease.MaxPageSize, int(int64(l.chunk)*int64(len(res.Leases))/cost)))
	}
	return res.Leases, nil
}

// after is the Manager's page token that continues after the lease name.
func (l *lister) after(name string) string { return lease.PageTokenAfter(l.req.Prefix, name) }

// eachReadable calls f with each readable lease that ls reads, first (a
// chunk it has read) and then chunk by chunk, while the stream goes on:
// the stream holds one chunk of leases at a time (charged to its memory
// budget account) while its client takes their snapshots. A chunk the
// budget refuses ends the stream with an overflow event.
func eachReadable(s *stream, ls *lister, first []lease.Lease, readable func(string) bool, f func(lease.Lease)) error {
	chunk := first
	for {
		for _, l := range chunk {
			if readable(l.Name) {
				f(l)
			}
		}
		if ls.done || !s.ok() {
			return nil
		}
		var err error
		if chunk, err = ls.next(); err != nil {
			var me *memoryError
			if errors.As(err, &me) {
				s.failMemory(me.need)
			}
			return err
		}
	}
}
