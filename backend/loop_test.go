package backend_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
)

// scripted is the memory store whose attempts first fail with the errors
// in fail, one per attempt, and which counts its reads and attempts.
type scripted struct {
	*memory.Store
	hints backend.Hints
	mu    sync.Mutex
	fail  []error
	gets  atomic.Int64
	tries atomic.Int64
	inTry atomic.Int64 // attempts running now
	most  atomic.Int64 // most attempts seen running at once
}

func (s *scripted) Hints() backend.Hints { return s.hints }

func (s *scripted) Get(ctx context.Context, name string) (backend.Snapshot, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, name)
}

func (s *scripted) Try(ctx context.Context, name string, decide backend.Decide) (backend.Snapshot, error) {
	s.tries.Add(1)
	n := s.inTry.Add(1)
	defer s.inTry.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	var err error
	if len(s.fail) > 0 {
		err, s.fail = s.fail[0], s.fail[1:]
	}
	s.mu.Unlock()
	if err != nil {
		return backend.Snapshot{}, err
	}
	return s.Store.Try(ctx, name, decide)
}

func write(s backend.Snapshot) (*backend.Row, error) {
	r := &backend.Row{FencingToken: 1, ExpireTime: s.ServerTime.Add(time.Second)}
	if s.Row != nil {
		r.FencingToken = s.Row.FencingToken + 1
	}
	return r, nil
}

func refuse(backend.Snapshot) (*backend.Row, error) { return nil, nil }

// TestLoopRetriesConflicts: conflicts are retried with their reason
// reported, up to MaxAttempts; other errors are not retried.
func TestLoopRetriesConflicts(t *testing.T) {
	lost := backend.Conflict("aborted", errors.New("lost a race"))
	var reasons []string
	s := &scripted{Store: memory.New(), fail: []error{lost, lost}}
	s.hints = backend.Hints{MaxAttempts: 3, OnRetry: func(r string) { reasons = append(reasons, r) }}
	l := backend.NewLoop(s)
	snap, err := l.Update(t.Context(), "a", write)
	if err != nil || snap.Row.FencingToken != 1 {
		t.Fatalf("Update after two conflicts = %+v, %v; want the write", snap.Row, err)
	}
	if len(reasons) != 2 || reasons[0] != "aborted" || s.tries.Load() != 3 {
		t.Fatalf("retries %v after %d attempts, want [aborted aborted] after 3", reasons, s.tries.Load())
	}

	s.fail = []error{lost, lost, lost}
	if _, err := l.Update(t.Context(), "a", write); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("Update after MaxAttempts conflicts = %v, want ErrConflict", err)
	}
	down := errors.New("down")
	s.fail = []error{down}
	before := s.tries.Load()
	if _, err := l.Update(t.Context(), "a", write); err != down || s.tries.Load() != before+1 {
		t.Fatalf("Update on a plain error = %v after %d attempts, want the error after one", err, s.tries.Load()-before)
	}
}

// TestLoopDecideError: decide's error comes back unchanged, nothing written.
func TestLoopDecideError(t *testing.T) {
	boom := errors.New("boom")
	l := backend.NewLoop(memory.New())
	if _, err := l.Update(t.Context(), "a", func(backend.Snapshot) (*backend.Row, error) { return nil, boom }); err != boom {
		t.Fatalf("Update = %v, want decide's error unchanged", err)
	}
}

// TestLoopSettlesAtTheDeadline: an error that comes a moment before ctx's
// deadline (a server ends the call at the deadline it was sent) is ctx's
// own error once ctx is done, so a caller comparing it with ctx.Err()
// agrees; far from the deadline the error is returned at once.
func TestLoopSettlesAtTheDeadline(t *testing.T) {
	unavailable := errors.Join(backend.ErrUnavailable, errors.New("no answer"))
	s := &scripted{Store: memory.New(), fail: []error{unavailable}}
	l := backend.NewLoop(s)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Update(ctx, "a", write); err != context.DeadlineExceeded || ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("Update 20ms before the deadline = %v (ctx.Err() %v), want context.DeadlineExceeded", err, ctx.Err())
	}
	s.fail = []error{unavailable}
	far, cancel2 := context.WithTimeout(t.Context(), time.Hour)
	defer cancel2()
	start := time.Now()
	if _, err := l.Update(far, "a", write); !errors.Is(err, backend.ErrUnavailable) || time.Since(start) > backend.DeadlineSlack {
		t.Fatalf("Update an hour before the deadline = %v after %v, want ErrUnavailable at once", err, time.Since(start))
	}
}

// TestLoopReadFirst: with ReadFirstAdaptive a refusal after a refusal is
// answered from a read, with no attempt; a write after a write goes
// straight to the attempt; ExpectWrite skips the read once.
func TestLoopReadFirst(t *testing.T) {
	s := &scripted{Store: memory.New(), hints: backend.Hints{ReadFirst: backend.ReadFirstAdaptive}}
	l := backend.NewLoop(s)
	step := func(decide backend.Decide, gets, tries int64) {
		t.Helper()
		g, tr := s.gets.Load(), s.tries.Load()
		if _, err := l.Update(t.Context(), "a", decide); err != nil {
			t.Fatal(err)
		}
		if s.gets.Load()-g != gets || s.tries.Load()-tr != tries {
			t.Fatalf("reads %d, attempts %d; want %d, %d", s.gets.Load()-g, s.tries.Load()-tr, gets, tries)
		}
	}
	step(write, 0, 1)  // unknown: expected to write
	step(write, 0, 1)  // wrote last time
	step(refuse, 0, 1) // wrote last time: decided in the attempt
	step(refuse, 1, 0) // refused last time: read first, no attempt
	step(write, 1, 1)  // a write after a refusal pays the read
	step(refuse, 0, 1)
	l.ExpectWrite("a")
	step(write, 0, 1)

	never := &scripted{Store: memory.New()}
	nl := backend.NewLoop(never)
	for range 3 {
		if _, err := nl.Update(t.Context(), "a", refuse); err != nil {
			t.Fatal(err)
		}
	}
	if never.gets.Load() != 0 {
		t.Fatalf("a store without ReadFirst was read %d times", never.gets.Load())
	}
}

// TestLoopGate: one attempt per name at a time; names apart in parallel,
// unless OneAtATime.
func TestLoopGate(t *testing.T) {
	for _, tc := range []struct {
		oneAtATime bool
		names      []string
		most       int64
	}{
		{false, []string{"a"}, 1},
		{true, []string{"a", "b", "c", "d"}, 1},
	} {
		s := &scripted{Store: memory.New(), hints: backend.Hints{OneAtATime: tc.oneAtATime}}
		l := backend.NewLoop(s)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if _, err := l.Update(t.Context(), tc.names[i%len(tc.names)], write); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if s.most.Load() != tc.most {
			t.Fatalf("OneAtATime %v, names %v: %d attempts at once, want %d", tc.oneAtATime, tc.names, s.most.Load(), tc.most)
		}
	}
}
