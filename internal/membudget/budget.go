// Package membudget is one instance's memory budget: the bytes it queues or
// buffers on behalf of its clients (stream backlogs and chunks, list pages
// in flight, session out queues, request bodies, sockets), counted against
// one instance-wide total and a per-caller share (docs/contract.md §16).
//
// A charge that would pass either bound is refused whole: nothing is
// charged, and the caller refuses or ends the client with a clear reason.
// Charges are released exactly once, by the object that holds them
// (Account.Close), so the budget never leaks what a finished client held.
//
// A nil *Budget charges nothing and refuses nothing: code under test and
// embedders that set no budget keep their own per-object bounds only.
package membudget

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Budget counts bytes held for clients, in total and per caller. Its
// methods are safe for concurrent use.
type Budget struct {
	total, share int64

	mu       sync.Mutex
	used     int64
	byCaller map[string]int64
	refused  int64
}

// New returns a budget of total bytes for the instance, of which one
// caller may hold at most share. share ≤ 0 or > total means total.
func New(total, share int64) (*Budget, error) {
	if total <= 0 {
		return nil, fmt.Errorf("membudget: total %d bytes: want > 0", total)
	}
	if share <= 0 || share > total {
		share = total
	}
	return &Budget{total: total, share: share, byCaller: make(map[string]int64)}, nil
}

// Total is the instance's budget in bytes (0 for a nil budget).
func (b *Budget) Total() int64 {
	if b == nil {
		return 0
	}
	return b.total
}

// Share is one caller's share in bytes (0 for a nil budget).
func (b *Budget) Share() int64 {
	if b == nil {
		return 0
	}
	return b.share
}

// Charge reserves n ≥ 0 bytes for caller. It reports false, and charges
// nothing, when the instance's total or the caller's share would be
// exceeded. A nil budget always reports true.
func (b *Budget) Charge(caller string, n int64) bool {
	return b.charge(caller, n) == Granted
}

// Refusal says which limit refused a charge.
type Refusal int

const (
	// Granted: nothing refused the charge.
	Granted Refusal = iota
	// ByShare: the caller's share would have been exceeded.
	ByShare
	// ByTotal: the instance's total would have been exceeded (and the
	// caller's share would not).
	ByTotal
)

// charge is Charge, saying which limit refused, decided under the lock
// that decided the refusal (a reason computed later could see bytes
// released in between, and name the wrong limit).
func (b *Budget) charge(caller string, n int64) Refusal {
	if b == nil || n <= 0 {
		return Granted
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.byCaller[caller]
	switch {
	case c+n > b.share:
		b.refused++
		return ByShare
	case b.used+n > b.total:
		b.refused++
		return ByTotal
	}
	b.used += n
	b.byCaller[caller] = c + n
	return Granted
}

// Release gives back n bytes that Charge granted to caller.
func (b *Budget) Release(caller string, n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.byCaller[caller] - n
	if c < 0 {
		panic(fmt.Sprintf("membudget: caller %q released %d bytes more than it held", caller, -c))
	}
	if c == 0 {
		delete(b.byCaller, caller)
	} else {
		b.byCaller[caller] = c
	}
	b.used -= n
}

// Stats is a moment's view of a budget.
type Stats struct {
	// Total and Share are the bounds; Used is charged now, over Callers
	// callers; Refused counts the charges refused since the start.
	Total, Share, Used, Refused int64
	Callers                     int
}

// Stats returns the budget's counters (zero for a nil budget).
func (b *Budget) Stats() Stats {
	if b == nil {
		return Stats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Total: b.total, Share: b.share, Used: b.used, Refused: b.refused, Callers: len(b.byCaller)}
}

// Used returns the bytes charged to caller now.
func (b *Budget) Used(caller string) int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byCaller[caller]
}

// Heaviest returns up to n callers by what they are charged now, heaviest
// first (the overload manager's order of shedding, docs/contract.md §16).
func (b *Budget) Heaviest(n int) []string {
	if b == nil || n <= 0 {
		return nil
	}
	b.mu.Lock()
	type held struct {
		caller string
		n      int64
	}
	all := make([]held, 0, len(b.byCaller))
	for c, v := range b.byCaller {
		all = append(all, held{c, v})
	}
	b.mu.Unlock()
	slices.SortFunc(all, func(x, y held) int {
		if c := cmp.Compare(y.n, x.n); c != 0 {
			return c
		}
		return strings.Compare(x.caller, y.caller)
	})
	out := make([]string, 0, min(n, len(all)))
	for _, h := range all[:min(n, len(all))] {
		out = append(out, h.caller)
	}
	return out
}
