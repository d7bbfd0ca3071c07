package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasesvc/leasesvc/fence/pgfence"
)

// hooked is a pgfence.Beginner that runs hook in each transaction it
// begins, before pgfence's first statement.
type hooked struct {
	db   *pgxpool.Pool
	n    int // transactions begun
	hook func(ctx context.Context, n int, tx pgx.Tx) error
}

func (h *hooked) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := h.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	h.n++
	if err := h.hook(ctx, h.n, tx); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// snapshot makes tx take its snapshot now (its first statement).
func snapshot(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT 1`)
	return err
}

// TestSerializableConcurrentWrites: two fenced writes of one resource at
// serializable isolation, the second's snapshot taken before the first
// commits, so its statement meets SQLSTATE 40001 (asserted: it begins a
// second transaction). Both end without a raw 40001: the second is run
// again and succeeds, for a resource never written and for one written.
func TestSerializableConcurrentWrites(t *testing.T) {
	db := startDB(t, "serializable")
	s := newSigner(t)
	plain, _ := pgfence.New(db, s.v, "")
	ctx := t.Context()
	for i, name := range []string{"a resource never written", "a resource written"} {
		t.Run(name, func(t *testing.T) {
			resource := fmt.Sprintf("orders-%d", i)
			if i == 1 {
				if _, err := plain.Write(ctx, "orders", resource, s.proof("orders", 1), nil); err != nil {
					t.Fatal(err)
				}
			}
			first, second := int64(i+2), int64(i+3)
			secondSnapshot, firstDone := make(chan struct{}), make(chan struct{})
			snapshotTaken := sync.OnceFunc(func() { close(secondSnapshot) })
			h := &hooked{db: db, hook: func(ctx context.Context, n int, tx pgx.Tx) error {
				if n > 1 {
					return nil
				}
				err := snapshot(ctx, tx)
				snapshotTaken()
				<-firstDone // the first commits after this snapshot
				return err
			}}
			f, _ := pgfence.New(h, s.v, "")
			errs := make(chan error, 1)
			go func() {
				defer close(firstDone)
				_, err := plain.Write(ctx, "orders", resource, s.proof("orders", first), func(tx pgx.Tx) error {
					<-secondSnapshot
					return insertItem(ctx, resource+"/first")(tx)
				})
				errs <- err
			}()
			_, err2 := f.Write(ctx, "orders", resource, s.proof("orders", second), insertItem(ctx, resource+"/second"))
			snapshotTaken() // had it failed to begin, the first would wait for ever
			err1 := <-errs
			for _, err := range []error{err1, err2} {
				var pg *pgconn.PgError
				if errors.As(err, &pg) && pg.Code == "40001" && !errors.Is(err, pgfence.ErrSerialization) {
					t.Fatalf("a raw SQLSTATE 40001: %v", err)
				}
				if err != nil {
					t.Fatalf("first: %v; second: %v; want both to succeed (the second run again)", err1, err2)
				}
			}
			if h.n != 2 {
				t.Fatalf("the second write began %d transactions, want 2: its first met no serialization failure, the test proves nothing", h.n)
			}
			if lease, token := stored(t, db, resource); lease != "orders" || token != second {
				t.Fatalf("stored %q %d, want orders %d", lease, token, second)
			}
		})
	}
}

// TestSerializableExhausted: a write whose every attempt fails to
// serialize (another transaction commits to the token's row after each
// attempt's snapshot) gives up after pgfence.Attempts with an error that
// wraps pgfence.ErrSerialization and the database's 40001, having run
// none of its writes and stored nothing.
func TestSerializableExhausted(t *testing.T) {
	db := startDB(t, "serializable")
	s := newSigner(t)
	ctx := t.Context()
	plain, _ := pgfence.New(db, s.v, "")
	if _, err := plain.Write(ctx, "orders", "orders", s.proof("orders", 1), nil); err != nil {
		t.Fatal(err)
	}
	h := &hooked{db: db, hook: func(ctx context.Context, _ int, tx pgx.Tx) error {
		if err := snapshot(ctx, tx); err != nil {
			return err
		}
		_, err := db.Exec(ctx, `UPDATE leasesvc_fence SET updated_at = now() WHERE resource = 'orders'`) // another connection
		return err
	}}
	f, _ := pgfence.New(h, s.v, "")
	ran := false
	_, err := f.Write(ctx, "orders", "orders", s.proof("orders", 2), func(pgx.Tx) error { ran = true; return nil })
	var pg *pgconn.PgError
	if !errors.Is(err, pgfence.ErrSerialization) || !errors.As(err, &pg) || pg.Code != "40001" {
		t.Fatalf("Write = %v, want ErrSerialization wrapping SQLSTATE 40001", err)
	}
	if h.n != pgfence.Attempts || ran {
		t.Fatalf("%d attempts, writes ran %v; want %d attempts, writes never run", h.n, ran, pgfence.Attempts)
	}
	if _, token := stored(t, db, "orders"); token != 1 {
		t.Fatalf("stored token %d, want 1", token)
	}
}
