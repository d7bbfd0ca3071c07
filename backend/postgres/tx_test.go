package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/postgres"
	"github.com/leasesvc/leasesvc/backend/postgres/pgtest"
)

// requests counts what a pool sends: each SendBatch (one round trip) and
// each query sent alone (BEGIN, COMMIT and ROLLBACK of a pgx.Tx among
// them), by SQL.
type requests struct {
	mu      sync.Mutex
	batches int
	alone   []string
}

func (r *requests) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alone = append(r.alone, d.SQL)
	return ctx
}

func (*requests) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *requests) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches++
	return ctx
}

func (*requests) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*requests) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// take returns what was counted since the last take, and starts again.
func (r *requests) take() (batches int, alone []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	batches, alone = r.batches, r.alone
	r.batches, r.alone = 0, nil
	return batches, alone
}

// TestTryRoundTrips: an attempt that writes is two round trips (BEGIN with
// the locking read and the clock, then the write with COMMIT), one that
// writes nothing is those of its read and its ROLLBACK; a write that fails
// commits nothing, an insert that lost its race is a conflict that wrote
// nothing; and the connection goes back to the pool idle after each, never
// dropped.
func TestTryRoundTrips(t *testing.T) {
	cluster := pgtest.Start(t)
	cfg, err := pgxpool.ParseConfig(cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	reqs := &requests{}
	cfg.ConnConfig.Tracer, cfg.MaxConns = reqs, 2 // used one at a time, but for the lost race's inner attempt
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := postgres.New(pool)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	now, err := s.Get(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	at := now.ServerTime.Truncate(time.Millisecond)
	row := func(holder string) *backend.Row {
		return &backend.Row{Holder: holder, FencingToken: 1, TTL: time.Minute, AcquireTime: at, RenewTime: at, ExpireTime: at.Add(time.Hour), Transitions: 1}
	}
	write := func(r *backend.Row) backend.Decide {
		return func(backend.Snapshot) (*backend.Row, error) { return r, nil }
	}
	holder := func(name string) string {
		t.Helper()
		snap, err := s.Get(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Row == nil {
			return ""
		}
		return snap.Row.Holder
	}
	idle := func(what string) {
		t.Helper()
		if st := pool.Stat(); st.TotalConns() != 1 || st.IdleConns() != 1 || st.NewConnsCount() != 1 {
			t.Fatalf("after %s the pool holds %d connections, %d idle, of %d made; want its first, idle", what, st.TotalConns(), st.IdleConns(), st.NewConnsCount())
		}
	}
	for _, name := range []string{"a", "b"} { // prepares every statement on the connection
		if _, err := s.Try(t.Context(), name, write(row("warm"))); err != nil {
			t.Fatal(err)
		}
	}
	idle("the warm-up")
	reqs.take()

	if _, err := s.Try(t.Context(), "a", write(row("h"))); err != nil {
		t.Fatal(err)
	}
	if batches, alone := reqs.take(); batches != 2 || len(alone) != 0 {
		t.Errorf("an attempt that writes sent %d round trips of batches and %q alone; want 2 batches and nothing alone", batches, alone)
	}
	idle("an attempt that writes")

	refused := errors.New("refused")
	if _, err := s.Try(t.Context(), "a", func(backend.Snapshot) (*backend.Row, error) { return nil, refused }); !errors.Is(err, refused) {
		t.Fatalf("a refusing attempt returned %v; want decide's error", err)
	}
	if batches, alone := reqs.take(); batches != 1 || len(alone) != 1 || alone[0] != "ROLLBACK" {
		t.Errorf("an attempt that writes nothing sent %d batches and %q alone; want 1 batch and ROLLBACK", batches, alone)
	}
	idle("an attempt that writes nothing")

	bad := row("nul")
	bad.Metadata = []byte("{\"k\":\"\x00\"}") // PostgreSQL's text refuses NUL: the write fails
	if _, err := s.Try(t.Context(), "a", write(bad)); err == nil || !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("an attempt whose write fails returned %v; want an error wrapping ErrUnavailable", err)
	}
	if got := holder("a"); got != "h" {
		t.Errorf("after a failed write the holder is %q; want %q, unchanged (nothing committed)", got, "h")
	}
	idle("a failed write")

	_, err = s.Try(t.Context(), "c", func(snap backend.Snapshot) (*backend.Row, error) {
		if snap.Row == nil { // another transaction creates the row between the read and the write
			if _, err := s.Try(context.WithoutCancel(t.Context()), "c", write(row("other"))); err != nil {
				return nil, err
			}
		}
		return row("late"), nil
	})
	if !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("an insert of a row created since the read returned %v; want an error wrapping ErrConflict", err)
	}
	if got := holder("c"); got != "other" {
		t.Errorf("after the lost insert the holder is %q; want %q, the other transaction's", got, "other")
	}
	if st := pool.Stat(); st.IdleConns() != 2 || st.NewConnsCount() != 2 {
		t.Errorf("after the lost insert the pool holds %d idle connections of %d made; want 2 of 2 (the inner attempt's second), none dropped", st.IdleConns(), st.NewConnsCount())
	}
}
