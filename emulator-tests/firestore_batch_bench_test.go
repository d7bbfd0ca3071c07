package emulatortests

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gfs "cloud.google.com/go/firestore"
	vkit "cloud.google.com/go/firestore/apiv1"
	pb "cloud.google.com/go/firestore/apiv1/firestorepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/firestore"
	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
)

// rpcCounter counts the RPCs a Firestore client sends and the documents
// they read and write, as Firestore bills them: a document read per
// document asked for by BatchGetDocuments (a missing one included), a
// document write per write of Commit or BatchWrite.
type rpcCounter struct {
	rpcs, reads, writes, batchWrites atomic.Int64
}

func (c *rpcCounter) snapshot() [4]int64 {
	return [4]int64{c.rpcs.Load(), c.reads.Load(), c.writes.Load(), c.batchWrites.Load()}
}

// note counts one request message.
func (c *rpcCounter) note(req any) {
	switch r := req.(type) {
	case *pb.BatchGetDocumentsRequest:
		c.reads.Add(int64(len(r.GetDocuments())))
	case *pb.CommitRequest:
		c.writes.Add(int64(len(r.GetWrites())))
	case *pb.BatchWriteRequest:
		c.writes.Add(int64(len(r.GetWrites())))
		c.batchWrites.Add(1)
	}
}

func (c *rpcCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.rpcs.Add(1)
	c.note(req)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.rpcs.Add(1)
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return countedStream{s, c}, nil
}

// countedStream counts the requests sent on a streaming RPC
// (BatchGetDocuments, which Get uses, is server-streaming).
type countedStream struct {
	grpc.ClientStream
	c *rpcCounter
}

func (s countedStream) SendMsg(m any) error {
	s.c.note(m)
	return s.ClientStream.SendMsg(m)
}

// emulatorOwner is the credential the Firestore emulator accepts as an
// admin, as the client library sends it to an emulator.
type emulatorOwner struct{}

func (emulatorOwner) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer owner"}, nil
}
func (emulatorOwner) RequireTransportSecurity() bool { return false }

// countedFirestore returns a Firestore client and a raw (apiv1) client of
// the emulator over one connection whose every RPC the returned counter
// counts. With FIRESTORE_EMULATOR_HOST set the client library dials the
// emulator itself and ignores option.WithGRPCDialOption, so the counting
// connection is dialed here and handed over with option.WithGRPCConn.
func countedFirestore(b *testing.B) (*gfs.Client, *vkit.Client, *rpcCounter) {
	b.Helper()
	addr := emulators.Firestore(b)
	cnt := &rpcCounter{}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(emulatorOwner{}),
		grpc.WithUnaryInterceptor(cnt.unary),
		grpc.WithStreamInterceptor(cnt.stream))
	if err != nil {
		b.Fatalf("dial the Firestore emulator at %s: %v", addr, err)
	}
	c, err := gfs.NewClient(b.Context(), emulators.Project(), option.WithGRPCConn(conn))
	if err != nil {
		b.Fatalf("firestore.NewClient: %v", err)
	}
	raw, err := vkit.NewClient(b.Context(), option.WithGRPCConn(conn))
	if err != nil {
		b.Fatalf("apiv1.NewClient: %v", err)
	}
	b.Cleanup(func() {
		_ = raw.Close()
		_ = c.Close()
		_ = conn.Close()
	})
	return c, raw, cnt
}

// renewed is the renewal of the row in snap: renewed at the read's
// server time, for its TTL.
func renewed(snap backend.Snapshot) (*backend.Row, error) {
	if snap.Row == nil {
		return nil, fmt.Errorf("renew: no lease")
	}
	r := *snap.Row
	r.RenewTime = snap.ServerTime
	r.ExpireTime = snap.ServerTime.Add(r.TTL)
	return &r, nil
}

// batchWriter sends the conditional writes handed to it in BatchWrite
// RPCs, one at a time: what arrives while one is in flight goes in the
// next (group commit, as the Spanner backend's batcher does with
// transactions). Each caller gets its own write's status.
type batchWriter struct {
	raw *vkit.Client
	db  string

	mu       sync.Mutex
	pending  []batchItem
	inFlight bool
}

type batchItem struct {
	w    *pb.Write
	done chan error
}

// maxBatchWrite is the most writes one BatchWrite request may carry.
const maxBatchWrite = 500

// write sends w in the next BatchWrite and returns its result.
func (bw *batchWriter) write(ctx context.Context, w *pb.Write) error {
	it := batchItem{w: w, done: make(chan error, 1)}
	bw.mu.Lock()
	bw.pending = append(bw.pending, it)
	lead := !bw.inFlight
	bw.inFlight = true
	bw.mu.Unlock()
	if lead {
		go bw.run(context.WithoutCancel(ctx))
	}
	select {
	case err := <-it.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run sends batches until nothing is pending.
func (bw *batchWriter) run(ctx context.Context) {
	for {
		bw.mu.Lock()
		n := min(len(bw.pending), maxBatchWrite)
		if n == 0 {
			bw.inFlight = false
			bw.mu.Unlock()
			return
		}
		batch := bw.pending[:n:n]
		bw.pending = slices.Clone(bw.pending[n:])
		bw.mu.Unlock()
		bw.send(ctx, batch)
	}
}

func (bw *batchWriter) send(ctx context.Context, batch []batchItem) {
	req := &pb.BatchWriteRequest{Database: bw.db}
	for _, it := range batch {
		req.Writes = append(req.Writes, it.w)
	}
	call, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "google-cloud-resource-prefix", bw.db), 10*time.Second)
	defer cancel()
	resp, err := bw.raw.BatchWrite(call, req)
	if err == nil && len(resp.GetStatus()) != len(batch) {
		err = fmt.Errorf("BatchWrite: %d statuses for %d writes", len(resp.GetStatus()), len(batch))
	}
	for i, it := range batch {
		switch {
		case err != nil:
			it.done <- fmt.Errorf("BatchWrite of %d writes: %w", len(batch), err)
		case codes.Code(resp.Status[i].GetCode()) != codes.OK:
			it.done <- fmt.Errorf("BatchWrite: write %d of %d (%s): %w", i, len(batch), it.w.GetUpdate().GetName(),
				status.ErrorProto(resp.Status[i]))
		default:
			it.done <- nil
		}
	}
}

// batchRenew renews the lease document ref as the group-commit idea would:
// a read (the document and its update time), then the renewal's write,
// conditioned on that update time, in the next BatchWrite.
func batchRenew(ctx context.Context, bw *batchWriter, ref *gfs.DocumentRef) error {
	ds, err := ref.Get(ctx)
	if err != nil {
		return fmt.Errorf("batch renew %s: get: %w", ref.ID, err)
	}
	var ttl struct {
		TTLMs int64 `firestore:"ttlMs"`
	}
	if err := ds.DataTo(&ttl); err != nil {
		return fmt.Errorf("batch renew %s: decode: %w", ref.ID, err)
	}
	now := ds.ReadTime.Truncate(time.Microsecond)
	w := &pb.Write{
		Operation: &pb.Write_Update{Update: &pb.Document{Name: ref.Path, Fields: map[string]*pb.Value{
			"renewTime":  {ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(now)}},
			"expireTime": {ValueType: &pb.Value_TimestampValue{TimestampValue: timestamppb.New(now.Add(time.Duration(ttl.TTLMs) * time.Millisecond))}},
		}}},
		UpdateMask:      &pb.DocumentMask{FieldPaths: []string{"renewTime", "expireTime"}},
		CurrentDocument: &pb.Precondition{ConditionType: &pb.Precondition_UpdateTime{UpdateTime: timestamppb.New(ds.UpdateTime)}},
	}
	if err := bw.write(ctx, w); err != nil {
		return fmt.Errorf("batch renew %s: %w", ref.ID, err)
	}
	return nil
}

// BenchmarkFirestoreBatchPaced offers renewals of distinct leases at 1,
// 100 and 1,000 a second (open loop: each starts on schedule, whatever the
// previous ones are doing), on one emulator, by two paths in turn:
// "store", the Firestore backend's Store through backend.Loop (a read and a
// conditional write per renewal, as the service renews), and "batch", a
// read per renewal and the writes of all renewals that arrived meanwhile in
// one BatchWrite, each with an update-time precondition and its own
// result. It reports RPCs, billed document reads and writes per renewal,
// renewals/s achieved and p50/p99 latency:
//
//	go test -run '^$' -bench FirestoreBatchPaced -benchtime 1000x ./emulator-tests/
func BenchmarkFirestoreBatchPaced(b *testing.B) {
	c, raw, cnt := countedFirestore(b)
	coll := uniqueCollection("batch-bench")
	s, err := firestore.New(c, firestore.WithCollection(coll))
	if err != nil {
		b.Fatalf("firestore.New: %v", err)
	}
	loop := backend.NewLoop(s)
	bw := &batchWriter{raw: raw, db: fmt.Sprintf("projects/%s/databases/%s", emulators.Project(), gfs.DefaultDatabaseID)}
	const leases = 1000
	name := func(i int) string { return fmt.Sprintf("lease-%04d", i%leases) }
	// Set up the leases, and warm the emulator, with both paths.
	pooled(b, leases, 32, func(i int) {
		if _, err := loop.Update(b.Context(), name(i), func(snap backend.Snapshot) (*backend.Row, error) {
			now := snap.ServerTime
			return &backend.Row{Holder: "h", FencingToken: 1, TTL: 30 * time.Second, AcquireTime: now,
				RenewTime: now, ExpireTime: now.Add(30 * time.Second), Transitions: 1}, nil
		}); err != nil {
			b.Errorf("set up %s: %v", name(i), err)
		}
		if err := batchRenew(b.Context(), bw, c.Collection(coll).Doc(name(i))); err != nil {
			b.Errorf("warm-up: %v", err)
		}
	})
	if b.Failed() {
		return
	}
	paths := []struct {
		name  string
		renew func(ctx context.Context, i int) error
	}{
		{"store", func(ctx context.Context, i int) error {
			_, err := loop.Update(ctx, name(i), renewed)
			return err
		}},
		{"batch", func(ctx context.Context, i int) error {
			return batchRenew(ctx, bw, c.Collection(coll).Doc(name(i)))
		}},
	}
	for _, rate := range []int{1, 100, 1000} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("Rate=%d/path=%s", rate, p.name), func(b *testing.B) {
				n := b.N
				if rate == 1 {
					n = min(n, 10) // ten seconds
				}
				c0 := cnt.snapshot()
				elapsed, lat := paced(b, n, rate, func(i int) {
					if err := p.renew(b.Context(), i); err != nil {
						b.Errorf("renew %s: %v", name(i), err)
					}
				})
				c1 := cnt.snapshot()
				per := func(k int) float64 { return float64(c1[k]-c0[k]) / float64(n) }
				b.ReportMetric(float64(n)/elapsed.Seconds(), "renewals/s")
				b.ReportMetric(lat.pct(0.50), "p50-ms")
				b.ReportMetric(lat.pct(0.99), "p99-ms")
				b.ReportMetric(per(0), "rpcs/renewal")
				b.ReportMetric(per(1), "reads/renewal")
				b.ReportMetric(per(2), "writes/renewal")
				if bws := c1[3] - c0[3]; bws > 0 {
					b.ReportMetric(float64(c1[2]-c0[2])/float64(bws), "writes/BatchWrite")
				}
			})
		}
	}
}
