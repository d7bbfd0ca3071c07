package backend

import (
	"fmt"
	"sync"
)

// ReadFirst says when Loop decides on a Get before an attempt. The read
// answers refusals (lease_held, lease_lost, an idempotent release) without
// an attempt, so followers polling a held lease never contend with its
// holder; an answer that writes pays for the read on top of the attempt.
type ReadFirst int

const (
	// ReadFirstNever never reads first: refusals are decided in the attempt.
	// The zero value.
	ReadFirstNever ReadFirst = iota
	// ReadFirstAdaptive reads first when the previous Update of the same
	// lease in this process wrote nothing (a refusal is likely again), and
	// goes straight to the attempt otherwise (a renewal, a new holding), or
	// when Loop.ExpectWrite said the next Update will likely write.
	ReadFirstAdaptive
	// ReadFirstAlways reads first on every Update.
	ReadFirstAlways
)

// String returns the mode as ParseReadFirst reads it.
func (m ReadFirst) String() string {
	switch m {
	case ReadFirstAdaptive:
		return "adaptive"
	case ReadFirstAlways:
		return "always"
	case ReadFirstNever:
		return "never"
	}
	return fmt.Sprintf("ReadFirst(%d)", int(m))
}

// ParseReadFirst reads "adaptive", "always" or "never".
func ParseReadFirst(s string) (ReadFirst, error) {
	for _, m := range []ReadFirst{ReadFirstAdaptive, ReadFirstAlways, ReadFirstNever} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("backend: read-first mode %q: want adaptive, always or never", s)
}

// maxHints bounds the names pathHints remembers; past it, it forgets all.
const maxHints = 10_000

// pathHints remembers, per lease name, whether the last Update in this
// process wrote (or, after ExpectWrite, whether the next is expected to).
// It only picks the path: every answer is still decided on a fresh read,
// so a wrong or forgotten hint costs one round trip, never correctness.
type pathHints struct {
	mu    sync.Mutex
	wrote map[string]bool
}

// readFirst reports whether the last Update of name wrote nothing. An
// unknown name is expected to write.
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
