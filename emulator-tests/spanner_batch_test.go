package emulatortests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"cloud.google.com/go/spanner/apiv1/spannerpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/leasesvc/leasesvc/backend"
	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
)

// counterRecord is the row an increment writes: the token one above
// what it read.
func counterRecord(snap backend.Snapshot) *backend.Row {
	now := snap.ServerTime
	r := &backend.Row{Holder: "h", FencingToken: 1, TTL: time.Second, AcquireTime: now,
		RenewTime: now, ExpireTime: now.Add(time.Second), Transitions: 1}
	if snap.Row != nil {
		r.FencingToken = snap.Row.FencingToken + 1
	}
	return r
}

// increment adds one to the counter record of lease name through loop
// (counterRecord), as a renewal writes its lease.
func increment(ctx context.Context, loop *backend.Loop, name string) error {
	_, err := loop.Update(ctx, name, func(snap backend.Snapshot) (*backend.Row, error) {
		return counterRecord(snap), nil
	})
	return err
}

// batchLoop returns a Loop over s that never reads first, so that every
// Update is an attempt, and that batches as s declares.
func batchLoop(s *spannerstore.Store) *backend.Loop {
	return backend.NewLoop(s, backend.WithReadFirst(backend.ReadFirstNever))
}

// holdBatch starts an Update through loop on its own lease whose decide
// blocks until the returned release is called, so that the Updates made
// through loop meanwhile queue behind its transaction in the loop's
// batcher and then share the next one. It returns once the blocking
// transaction is open, and release waits for its answer.
func holdBatch(t *testing.T, loop *backend.Loop, name string) (release func()) {
	t.Helper()
	entered, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := loop.Update(t.Context(), name, func(snap backend.Snapshot) (*backend.Row, error) {
			once.Do(func() { close(entered) })
			<-unblock
			return counterRecord(snap), nil
		})
		done <- err
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("the blocking Try ended before its decide ran: %v", err)
	}
	return func() {
		close(unblock)
		if err := <-done; err != nil {
			t.Errorf("the blocking Try: %v", err)
		}
	}
}

// waitQueued waits until the loop's batcher has the attempts waiting; the
// queue is not visible, so it waits for the callers' goroutines to have
// called Update (a short, bounded pause after they all started).
func waitQueued(started *sync.WaitGroup) {
	started.Wait()
	time.Sleep(200 * time.Millisecond)
}

// TestSpannerBatchAnswersEachCaller puts, in one batch, increments of
// distinct leases next to an attempt whose decide fails, one that decides
// to write nothing, one whose record cannot be written (a sub-millisecond
// TTL) and one whose decide panics: each caller gets its own answer, as if alone; the failures write
// nothing and do not fail the others; the increments all land, in one
// transaction. (backend's TestLoopBatch* check the same of the loop's
// batcher over a fake BatchStore; this is Spanner's TryBatch under it.)
func TestSpannerBatchAnswersEachCaller(t *testing.T) {
	s := spannerStore(t, spannerstore.WithLoop(backend.WithOneAtATime(true)), spannerstore.WithBatchMax(50))
	loop := batchLoop(s)
	prefix := spannerID("batch.")
	release := holdBatch(t, loop, prefix+"blocker")
	attempts0, txns0, _ := loop.BatchStats()

	const incrs = 8
	errDecide := errors.New("decide refuses")
	type answer struct {
		snap backend.Snapshot
		err  error
	}
	var (
		started, wg sync.WaitGroup
		answers     [incrs + 4]answer
	)
	try := func(i int, name string, decide backend.Decide) {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			snap, err := loop.Update(t.Context(), name, decide)
			answers[i] = answer{snap, err}
		})
	}
	for i := range incrs {
		try(i, fmt.Sprintf("%sincr%02d", prefix, i), func(snap backend.Snapshot) (*backend.Row, error) {
			return counterRecord(snap), nil
		})
	}
	try(incrs, prefix+"refused", func(backend.Snapshot) (*backend.Row, error) { return nil, errDecide })
	try(incrs+1, prefix+"unchanged", func(backend.Snapshot) (*backend.Row, error) { return nil, nil })
	try(incrs+2, prefix+"badttl", func(snap backend.Snapshot) (*backend.Row, error) {
		r := counterRecord(snap)
		r.TTL = 1500 * time.Microsecond
		return r, nil
	})
	try(incrs+3, prefix+"panics", func(backend.Snapshot) (*backend.Row, error) { panic("a bug in decide") })
	waitQueued(&started)
	release()
	wg.Wait()

	attempts, txns, _ := loop.BatchStats()
	if attempts-attempts0 != incrs+4 || txns-txns0 != 1 {
		t.Fatalf("%d attempts in %d transactions after the blocker, want %d in 1: the attempts did not share one batch",
			attempts-attempts0, txns-txns0, incrs+4)
	}
	for i := range incrs {
		a := answers[i]
		if a.err != nil || a.snap.Row == nil || a.snap.Row.FencingToken != 1 {
			t.Errorf("increment %d = %+v, %v; want token 1", i, a.snap.Row, a.err)
		}
		checkStored(t, s, fmt.Sprintf("%sincr%02d", prefix, i), 1)
	}
	if a := answers[incrs]; a.err != errDecide {
		t.Errorf("refused attempt = %v, want decide's own error value", a.err)
	}
	if a := answers[incrs+1]; a.err != nil || a.snap.Row != nil || a.snap.ServerTime.IsZero() {
		t.Errorf("unchanged attempt = %+v, %v; want no record at a server time", a.snap, a.err)
	}
	if a := answers[incrs+2]; a.err == nil || !strings.Contains(a.err.Error(), "whole number of milliseconds") {
		t.Errorf("attempt with a 1.5ms TTL = %v, want an error about milliseconds", a.err)
	}
	if a := answers[incrs+3]; a.err == nil || !strings.Contains(a.err.Error(), "decide panicked: a bug in decide") {
		t.Errorf("attempt whose decide panics = %v, want an error saying so", a.err)
	}
	for _, n := range []string{"refused", "unchanged", "badttl", "panics"} {
		checkStored(t, s, prefix+n, 0)
	}
}

// TestSpannerBatchSplitsAFailedCommit puts in one batch an attempt whose
// record Spanner refuses at commit (a holder longer than the column
// allows), which fails the whole transaction: the batch is split, each
// attempt runs alone, and only that caller gets the error.
func TestSpannerBatchSplitsAFailedCommit(t *testing.T) {
	s := spannerStore(t, spannerstore.WithLoop(backend.WithOneAtATime(true)))
	loop := batchLoop(s)
	prefix := spannerID("split.")
	release := holdBatch(t, loop, prefix+"blocker")
	_, _, splits0 := loop.BatchStats()

	const n = 6
	var (
		started, wg sync.WaitGroup
		errs        [n]error
	)
	for i := range n {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			_, errs[i] = loop.Update(t.Context(), fmt.Sprintf("%s%02d", prefix, i), func(snap backend.Snapshot) (*backend.Row, error) {
				r := counterRecord(snap)
				if i == 0 {
					r.Holder = strings.Repeat("h", 300) // Holder is STRING(256)
				}
				return r, nil
			})
		})
	}
	waitQueued(&started)
	release()
	wg.Wait()

	if _, _, splits := loop.BatchStats(); splits-splits0 != 1 {
		t.Fatalf("%d batches split, want 1", splits-splits0)
	}
	if errs[0] == nil || errors.Is(errs[0], backend.ErrConflict) {
		t.Errorf("the attempt with a 300-character holder = %v, want Spanner's refusal", errs[0])
	}
	checkStored(t, s, fmt.Sprintf("%s%02d", prefix, 0), 0)
	for i := 1; i < n; i++ {
		if errs[i] != nil {
			t.Errorf("attempt %d, batched with the refused one: %v", i, errs[i])
		}
		checkStored(t, s, fmt.Sprintf("%s%02d", prefix, i), 1)
	}
}

// TestSpannerBatchConflict forces a conflict inside a batch: while the
// batch's transaction is open, another transaction of the same client
// increments one of its leases. The emulator ends the older transaction
// (as Spanner aborts a loser), so the batch's commit fails as a whole with
// a conflict the client library does not retry. The batch is split, each
// attempt runs again alone, and every caller's answer holds: both
// increments of the shared lease land (tokens 1 and 2, one each) and the
// other leases of the batch are written once.
func TestSpannerBatchConflict(t *testing.T) {
	_, client := spannerSetup(t)
	rival, err := spannerstore.New(client, spannerstore.WithBatchMax(1))
	if err != nil {
		t.Fatal(err)
	}
	var batchRuns atomic.Int64
	s := spannerStore(t, spannerstore.WithLoop(backend.WithOneAtATime(true)))
	loop := batchLoop(s)
	prefix := spannerID("conflict.")
	shared := prefix + "shared"
	release := holdBatch(t, loop, prefix+"blocker")
	_, _, splits0 := loop.BatchStats()

	const n = 5
	var (
		started, wg sync.WaitGroup
		tokens      [n]int64
		errs        [n]error
		rivalToken  int64
		rivalErr    error
	)
	for i := range n {
		name := fmt.Sprintf("%s%02d", prefix, i)
		if i == 0 {
			name = shared
		}
		started.Add(1)
		wg.Go(func() {
			started.Done()
			snap, err := loop.Update(t.Context(), name, func(snap backend.Snapshot) (*backend.Row, error) {
				if i == 0 && batchRuns.Add(1) == 1 {
					rivalDone := make(chan struct{})
					go func() { // a transaction of the same client, while the batch's is open
						defer close(rivalDone)
						snap, err := rival.Try(t.Context(), shared, func(snap backend.Snapshot) (*backend.Row, error) {
							return counterRecord(snap), nil
						})
						rivalToken, rivalErr = tokenOf(snap), err
					}()
					<-rivalDone
				}
				return counterRecord(snap), nil
			})
			tokens[i], errs[i] = tokenOf(snap), err
		})
	}
	waitQueued(&started)
	release()
	wg.Wait()

	_, _, splits := loop.BatchStats()
	t.Logf("the batch's decide ran %d times on the shared lease; %d batches split; %d retries",
		batchRuns.Load(), splits-splits0, s.Retries())
	if splits-splits0 != 1 {
		t.Fatalf("%d batches split, want 1: the rival did not make the batch conflict", splits-splits0)
	}
	if rivalErr != nil || errs[0] != nil {
		t.Fatalf("increments of the shared lease: batch %v, rival %v", errs[0], rivalErr)
	}
	if tokens[0] != 2 || rivalToken != 1 {
		t.Errorf("tokens of the shared lease's increments: batch %d, rival %d; want 2 and 1", tokens[0], rivalToken)
	}
	checkStored(t, s, shared, 2)
	for i := 1; i < n; i++ {
		if errs[i] != nil || tokens[i] != 1 {
			t.Errorf("increment %d in the batch = %d, %v; want token 1", i, tokens[i], errs[i])
		}
		checkStored(t, s, fmt.Sprintf("%s%02d", prefix, i), 1)
	}
}

func tokenOf(snap backend.Snapshot) int64 {
	if snap.Row == nil {
		return 0
	}
	return snap.Row.FencingToken
}

// checkStored fails the test unless the token stored under name is want
// (0: no record).
func checkStored(t *testing.T, s backend.Store, name string, want int64) {
	t.Helper()
	got, err := s.Get(t.Context(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	if tokenOf(got) != want {
		t.Errorf("%s holds token %d, want %d", name, tokenOf(got), want)
	}
}

// commitDelays records the max_commit_delay of every Commit RPC a client
// sends.
type commitDelays struct {
	mu     sync.Mutex
	delays []*time.Duration // nil: the request carried none
}

func (c *commitDelays) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*spannerpb.CommitRequest); ok {
		var d *time.Duration
		if r.MaxCommitDelay != nil {
			v := r.MaxCommitDelay.AsDuration()
			d = &v
		}
		c.mu.Lock()
		c.delays = append(c.delays, d)
		c.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestSpannerCommitDelayReachesEveryCommit: WithMaxCommitDelay (the
// service's LEASESVC_SPANNER_MAX_COMMIT_DELAY) is sent with every commit, of
// a lone transaction and of a batch's, and no delay is sent without it. The
// emulator ignores the option (docs/spanner.md), so what is checked is the
// request Spanner proper would receive.
func TestSpannerCommitDelayReachesEveryCommit(t *testing.T) {
	db, _ := spannerSetup(t)
	for _, tc := range []struct {
		delay    time.Duration
		batchMax int
	}{{100 * time.Millisecond, 1}, {100 * time.Millisecond, 100}, {spannerstore.MaxCommitDelayLimit, 100}, {0, 100}} {
		t.Run(fmt.Sprintf("delay=%v/BatchMax=%d", tc.delay, tc.batchMax), func(t *testing.T) {
			rec := &commitDelays{}
			client, err := spanner.NewClient(t.Context(), db, option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(rec.unary)))
			if err != nil {
				t.Fatalf("spanner.NewClient: %v", err)
			}
			defer client.Close()
			s, err := spannerstore.New(client, spannerstore.WithLoop(backend.WithOneAtATime(true)),
				spannerstore.WithBatchMax(tc.batchMax), spannerstore.WithMaxCommitDelay(tc.delay))
			if err != nil {
				t.Fatal(err)
			}
			loop := backend.NewLoop(s)
			prefix := spannerID("delay")
			if err := increment(t.Context(), loop, prefix+".alone"); err != nil {
				t.Fatal(err)
			}
			// With batching on, the increments queue behind a held
			// transaction and share the next one, so a batch's commit is
			// among those checked; with it off, each is its own.
			release := func() {}
			if tc.batchMax > 1 {
				release = holdBatch(t, loop, prefix+".blocker")
			}
			attempts0, txns0, _ := loop.BatchStats()
			var started, wg sync.WaitGroup
			for i := range 20 {
				started.Add(1)
				wg.Go(func() {
					started.Done()
					if err := increment(t.Context(), loop, fmt.Sprintf("%s.%d", prefix, i)); err != nil {
						t.Error(err)
					}
				})
			}
			waitQueued(&started)
			release()
			wg.Wait()
			if attempts, txns, _ := loop.BatchStats(); tc.batchMax > 1 && attempts-attempts0 <= txns-txns0 {
				t.Fatalf("%d attempts in %d transactions after the blocker: no batch was formed", attempts-attempts0, txns-txns0)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.delays) < 2 {
				t.Fatalf("%d commits recorded, want at least 2", len(rec.delays))
			}
			for i, d := range rec.delays {
				switch {
				case tc.delay == 0 && d != nil:
					t.Errorf("commit %d carried max_commit_delay %v, want none", i, *d)
				case tc.delay > 0 && d == nil:
					t.Errorf("commit %d carried no max_commit_delay, want %v", i, tc.delay)
				case tc.delay > 0 && *d != tc.delay:
					t.Errorf("commit %d carried max_commit_delay %v, want %v", i, *d, tc.delay)
				}
			}
			t.Logf("%d commits, each with max_commit_delay %v", len(rec.delays), tc.delay)
		})
	}
}
