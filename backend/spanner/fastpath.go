package spanner

import (
	"fmt"
	"sync"
)

// FastPath says when Update decides on a strong single read before its
// read-write transaction. The read answers refusals (lease_held,
// lease_lost, an idempotent release) without a transaction or locks, so
// followers polling a held lease never contend with its holder; an answer
// that writes pays for the read on top of the transaction.
type FastPath int

const (
	// FastPathAdaptive reads first when the previous Update of the same
	// lease in this process wrote nothing (a refusal is likely again), and
	// goes straight to the transaction otherwise (a renewal or a new
	// holding), or when Store.ExpectWrite said the next Update will likely
	// write (a waiting acquire woken by the end of the holding). The
	// default.
	FastPathAdaptive FastPath = iota
	// FastPathAlways reads first on every Update.
	FastPathAlways
	// FastPathNever never reads first: refusals are decided inside the
	// read-write transaction.
	FastPathNever
)

// String returns the mode as ParseFastPath reads it.
func (m FastPath) String() string {
	switch m {
	case FastPathAdaptive:
		return "adaptive"
	case FastPathAlways:
		return "always"
	case FastPathNever:
		return "never"
	}
	return fmt.Sprintf("FastPath(%d)", int(m))
}

// ParseFastPath reads "adaptive", "always" or "never".
func ParseFastPath(s string) (FastPath, error) {
	for _, m := range []FastPath{FastPathAdaptive, FastPathAlways, FastPathNever} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("spanner: fast path %q: want adaptive, always or never", s)
}

// maxHints bounds the names pathHints remembers; past it, it forgets all.
const maxHints = 10_000

// pathHints remembers, per lease name, whether the last Update in this
// process wrote (or, after ExpectWrite, whether the next is expected to). It only picks the path: every answer is still decided on a
// fresh read of the database, so a wrong or forgotten hint costs one round
// trip, never correctness.
type pathHints struct {
	mu    sync.Mutex
	wrote map[string]bool
}

// readFirst reports whether Update of name should try the fast path: the
// last Update of name wrote nothing. An unknown name is expected to write.
func (h *pathHints) readFirst(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	wrote, known := h.wrote[name]
	return known && !wrote
}

// record notes whether the Update of name wrote.
func (h *pathHints) record(name string, wrote bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.wrote == nil || len(h.wrote) >= maxHints {
		h.wrote = make(map[string]bool)
	}
	h.wrote[name] = wrote
}
