package emulatortests

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"
	"google.golang.org/grpc"

	"github.com/leasesvc/leasesvc/backend"
	spannerstore "github.com/leasesvc/leasesvc/backend/spanner"
	"github.com/leasesvc/leasesvc/lease"
)

// rpcTrace records the RPCs a Spanner client sends while it is on: each
// method's short name and how long it took, in order.
type rpcTrace struct {
	mu   sync.Mutex
	on   bool
	rpcs []tracedRPC
}

type tracedRPC struct {
	method string
	took   time.Duration
}

func (r *rpcTrace) add(method string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.rpcs = append(r.rpcs, tracedRPC{method[strings.LastIndex(method, "/")+1:], took})
	}
}

// start turns recording on, from empty; stop turns it off and returns what
// was recorded.
func (r *rpcTrace) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.rpcs = true, nil
}

func (r *rpcTrace) stop() []tracedRPC {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.rpcs
}

func (r *rpcTrace) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	start := time.Now()
	err := invoker(ctx, method, req, reply, cc, opts...)
	r.add(method, time.Since(start))
	return err
}

// stream times a streaming RPC from its start to the end of its stream (a
// query's rows).
func (r *rpcTrace) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	start := time.Now()
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		r.add(method, time.Since(start))
		return nil, err
	}
	return &tracedStream{ClientStream: s, done: func() { r.add(method, time.Since(start)) }}, nil
}

type tracedStream struct {
	grpc.ClientStream
	once sync.Once
	done func()
}

func (s *tracedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(s.done)
	}
	return err
}

// minimalDDL is the table of the minimal transaction: a key, an expire time
// indexed as the lease table's is, and a commit timestamp.
var minimalDDL = []string{
	`CREATE TABLE Minimal (Name STRING(128) NOT NULL, ExpireTime TIMESTAMP NOT NULL,
	  UpdateTime TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (Name)`,
	`CREATE INDEX MinimalByExpireTime ON Minimal (ExpireTime)`,
}

// minimalRenew is the least a renew can do on Spanner: one read-write
// transaction with SELECT CURRENT_TIMESTAMP(), a ReadRow of the lease and
// an InsertOrUpdate with a commit timestamp, into a table indexed on its
// expire time as the lease table is.
func minimalRenew(ctx context.Context, c *spanner.Client, name string) error {
	_, err := c.ReadWriteTransaction(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		var now time.Time
		if err := tx.Query(ctx, spanner.Statement{SQL: "SELECT CURRENT_TIMESTAMP()"}).Do(func(r *spanner.Row) error { return r.Columns(&now) }); err != nil {
			return err
		}
		if _, err := tx.ReadRow(ctx, "Minimal", spanner.Key{name}, []string{"ExpireTime"}); err != nil && spanner.ErrCode(err) != 5 {
			return err
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("Minimal", []string{"Name", "ExpireTime", "UpdateTime"},
			[]any{name, now.Add(30 * time.Second), spanner.CommitTimestamp})})
	})
	return err
}

// TestSpannerRenewTrace traces renews through lease.Manager as the service
// makes them on the emulator (one transaction at a time, adaptive read
// first, batching on), interleaved with the minimal transaction on the same
// emulator: the RPCs each sends, what they take, and what the process adds
// around them (gates, the batcher's hand-off, decide). A renew sends what
// the minimal transaction sends — its key read (the transaction begun
// inline), the clock and its commit — and no more: an extra RPC is a
// regression of the per-operation cost (docs/spanner.md#per-operation-cost).
func TestSpannerRenewTrace(t *testing.T) {
	db, _ := spannerSetup(t)
	_, minimal := spannerScratchDatabase(t, minimalDDL...)
	trace := &rpcTrace{}
	client, err := spanner.NewClient(t.Context(), db, option.WithGRPCDialOption(grpc.WithChainUnaryInterceptor(trace.unary)),
		option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(trace.stream)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	// The service's Store on the emulator, and the same without batching:
	// the difference is the batcher's hand-off.
	type path struct {
		what           string
		m              *lease.Manager
		token          int64
		name           string
		took, rpcTotal []time.Duration
	}
	var paths []*path
	for _, c := range []struct {
		what string
		opts []spannerstore.Option
	}{
		{"service (batching on)", nil},
		{"batching off", []spannerstore.Option{spannerstore.WithBatchMax(1)}},
	} {
		s, err := spannerstore.New(client, append(c.opts, spannerstore.WithLoop(backend.WithOneAtATime(true)))...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := lease.NewManager(s, lease.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p := &path{what: c.what, m: m, name: spannerID("trace.")}
		l, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: p.name, Holder: "h", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		p.token = l.FencingToken
		paths = append(paths, p)
	}
	const rounds = 40
	var base []time.Duration
	var shapes []string
	for i := range rounds + 5 {
		for _, p := range paths {
			trace.start()
			start := time.Now()
			if _, err := p.m.Renew(t.Context(), lease.RenewRequest{Name: p.name, Holder: "h", FencingToken: p.token}); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			rpcs := trace.stop()
			if i < 5 {
				continue // warm-up
			}
			var sum time.Duration
			var methods []string
			for _, r := range rpcs {
				sum += r.took
				methods = append(methods, r.method)
			}
			p.took, p.rpcTotal = append(p.took, took), append(p.rpcTotal, sum)
			shapes = append(shapes, strings.Join(methods, "+"))
		}
		mstart := time.Now()
		if err := minimalRenew(t.Context(), minimal, "m"); err != nil {
			t.Fatal(err)
		}
		if i >= 5 {
			base = append(base, time.Since(mstart))
		}
	}
	slices.Sort(shapes)
	shapes = slices.Compact(shapes)
	med := func(ds []time.Duration) time.Duration {
		ds = slices.Clone(ds)
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	t.Logf("minimal transaction p50 %v; RPCs of a renew: %v", med(base), shapes)
	for _, p := range paths {
		t.Logf("renew, %s: p50 %v, %+v over the minimal transaction (its RPCs %v, in process %v)",
			p.what, med(p.took), med(p.took)-med(base), med(p.rpcTotal), med(p.took)-med(p.rpcTotal))
	}
	for _, sh := range shapes {
		if sh != "ExecuteStreamingSql+StreamingRead+Commit" {
			t.Errorf("a renew sent %s, want ExecuteStreamingSql+StreamingRead+Commit (the clock, with the transaction begun inline, its key read, the commit)", sh)
		}
	}
}
