package firestore

import (
	"context"
	"sync"
	"sync/atomic"
)

// writeGate lets at most one write per lease name at a time leave one
// Store, and tells a writer whether another write of that name through the
// Store succeeded since its read, in which case its own write would fail its
// precondition and is not sent.
//
// It is an optimization only: correctness comes from the write's
// precondition in Firestore, which also covers writers in other processes.
// What it saves is the storm of doomed writes when many requests of one
// instance see a lease free at once (a hand-over under contention): one
// write goes out, the others read again and are refused. A holder never
// waits at the gate for contenders of a held lease, since they do not
// write.
type writeGate struct {
	mu    sync.Mutex
	names map[string]*gateEntry
}

// gateEntry is the gate of one name, alive while some Update of it runs.
type gateEntry struct {
	turn  chan struct{} // capacity 1: holding a value is the right to write
	wrote atomic.Uint64 // successful writes of the name through the Store
	users int           // Updates of the name in progress; guarded by writeGate.mu
}

// enter registers an Update of name; leave must follow.
func (g *writeGate) enter(name string) *gateEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.names == nil {
		g.names = map[string]*gateEntry{}
	}
	e, ok := g.names[name]
	if !ok {
		e = &gateEntry{turn: make(chan struct{}, 1)}
		g.names[name] = e
	}
	e.users++
	return e
}

// leave ends an Update of name, forgetting the name when it was the last.
func (g *writeGate) leave(name string, e *gateEntry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e.users--; e.users == 0 {
		delete(g.names, name)
	}
}

// lock waits for the right to write, or for ctx to be done.
func (e *gateEntry) lock(ctx context.Context) error {
	select {
	case e.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock gives the right to write back.
func (e *gateEntry) unlock() { <-e.turn }
