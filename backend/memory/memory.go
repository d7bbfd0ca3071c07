// Package memory is the embedded lease backend: rows in a map guarded by
// one mutex, and the process's monotonic clock as the server clock.
//
// It is the default for a first run and the backend of hermetic tests. It
// keeps nothing across a restart: every lease, and so every fencing token,
// starts again from nothing, which breaks the "never reused" promise of
// docs/contract.md §1 across restarts. Use Firestore or Spanner where that matters.
//
// It keeps each backend.Row as it is given, a copy in and a copy out
// (backend.Clone), and never reads a field of it but the name and the
// expire time it lists and scans by.
package memory

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

// Store is an in-memory backend.Store. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu    sync.Mutex
	rows  map[string]backend.Row
	names []string // sorted keys of rows, for List
}

var _ backend.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes now the Store's server clock, for tests that move time by
// hand (see ManualClock). The default is MonotonicClock().
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{rows: map[string]backend.Row{}}
	for _, o := range opts {
		o(s)
	}
	if s.now == nil {
		s.now = MonotonicClock()
	}
	return s
}

// MonotonicClock returns a clock that reads the wall time once and then
// advances with the process's monotonic clock, so a change of the wall
// clock (NTP step, manual set) never moves lease expiry.
func MonotonicClock() func() time.Time {
	start := time.Now()
	base := start.Round(0) // wall reading only
	return func() time.Time { return base.Add(time.Since(start)) }
}

// Get implements backend.Store.
func (s *Store) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return backend.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot(name), nil
}

// snapshot reads name at the current time; s.mu must be held.
func (s *Store) snapshot(name string) backend.Snapshot {
	snap := backend.Snapshot{ServerTime: s.now()}
	if r, ok := s.rows[name]; ok {
		r = backend.Clone(r)
		snap.Row = &r
	}
	return snap
}

// Try implements backend.Store. The mutex makes read, decide and write one
// step, so an attempt never conflicts.
func (s *Store) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return backend.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.snapshot(name)
	next, err := decide(snap)
	if err != nil || next == nil {
		return snap, err
	}
	if _, ok := s.rows[name]; !ok {
		i, _ := slices.BinarySearch(s.names, name)
		s.names = slices.Insert(s.names, i, name)
	}
	rec := backend.Clone(*next)
	rec.Name = name
	s.rows[name] = rec
	rec = backend.Clone(rec)
	snap.Row = &rec
	return snap, nil
}

var _ backend.Remover = (*Store)(nil)

// Remove implements backend.Remover. The mutex makes the read, ok and the
// delete one step, so a removal never conflicts.
func (s *Store) Remove(ctx context.Context, name string, ok func(backend.Snapshot) bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := s.snapshot(name)
	if snap.Row == nil || !ok(snap) {
		return false, nil
	}
	delete(s.rows, name)
	if i, found := slices.BinarySearch(s.names, name); found {
		s.names = slices.Delete(s.names, i, i+1)
	}
	return true, nil
}

// List implements backend.Store.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]backend.Row, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := max(prefix, after)
	i, found := slices.BinarySearch(s.names, start)
	if found && start == after {
		i++
	}
	var out []backend.Row
	for ; i < len(s.names) && len(out) < limit; i++ {
		n := s.names[i]
		if !strings.HasPrefix(n, prefix) {
			break
		}
		out = append(out, backend.Clone(s.rows[n]))
	}
	return out, s.now(), nil
}

// Ping implements backend.Store; memory always answers.
func (s *Store) Ping(ctx context.Context) error { return ctx.Err() }

var _ backend.ExpiryScanner = (*Store)(nil)

// ScanExpiry implements backend.ExpiryScanner by scanning every row: the
// memory backend has no index, and a scan of 100,000 rows takes about a
// millisecond.
func (s *Store) ScanExpiry(ctx context.Context, after backend.Cursor, until time.Time, limit int) ([]backend.Row, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	var out []backend.Row
	for _, r := range s.rows {
		if r.ExpireTime.After(until) || !cursorLess(after, r) {
			continue
		}
		out = append(out, r)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b backend.Row) int {
		if c := a.ExpireTime.Compare(b.ExpireTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	for i := range out {
		out[i] = backend.Clone(out[i])
	}
	return out, nil
}

// cursorLess reports whether r sorts after c.
func cursorLess(c backend.Cursor, r backend.Row) bool {
	if cmp := c.ExpireTime.Compare(r.ExpireTime); cmp != 0 {
		return cmp < 0
	}
	return c.Name < r.Name
}
