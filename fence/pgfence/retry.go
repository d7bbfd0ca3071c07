package pgfence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrSerialization: every attempt of a Write failed to serialize with a
// concurrent transaction (SQLSTATE 40001 serialization_failure or 40P01
// deadlock_detected). Nothing of the Write was stored; running it again
// may succeed. The error wrapping it wraps the database's error too.
var ErrSerialization = errors.New("pgfence: the transaction could not be serialized with a concurrent one")

// Attempts is how many times a Write runs its transaction while it fails
// to serialize.
const Attempts = 5

// retryBase is the backoff before the second attempt; it doubles after
// each, with jitter.
const retryBase = 2 * time.Millisecond

// retryable reports whether err is a transaction's failure to serialize,
// which running the transaction again may cure.
func retryable(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

// retry runs attempt up to Attempts times while it fails to serialize,
// waiting a jittered, doubling backoff between the attempts unless ctx
// ends first.
func retry(ctx context.Context, resource string, attempt func() error) error {
	backoff := retryBase
	for n := 1; ; n++ {
		err := attempt()
		if !retryable(err) {
			return err
		}
		if n == Attempts {
			return fmt.Errorf("%w: %q, %d attempts: %w", ErrSerialization, resource, n, err)
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: %q, %d attempts, then %w: %w", ErrSerialization, resource, n, context.Cause(ctx), err)
		case <-t.C:
		}
		backoff *= 2
	}
}
