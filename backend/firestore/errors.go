package firestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/backend"
)

// classify maps an error of the Firestore client to the backend sentinels,
// in one place:
//
//   - Aborted, FailedPrecondition, AlreadyExists: backend.ErrConflict (a
//     precondition failed: the document changed since it was read);
//   - Canceled, DeadlineExceeded: context.Canceled, context.DeadlineExceeded,
//     unwrapped (ctx's own error when ctx is done);
//   - everything else, Unavailable and ResourceExhausted first among them:
//     backend.ErrUnavailable, since the backend cannot serve the request
//     (a permission or configuration error is not a bug of the caller's).
//
// The native error stays reachable: fmt.Errorf("%w: %w", sentinel, err).
func classify(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	sentinel := backend.ErrUnavailable
	switch status.Code(err) {
	case codes.Canceled:
		return context.Canceled
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists:
		sentinel = backend.ErrConflict
	}
	return fmt.Errorf("backend/firestore: %s %q: %w: %w", op, name, sentinel, err)
}

// retryable reports whether Update retries err, a classified error:
// conflicts until ctx is done, Unavailable a few times.
func retryable(err error, unavailableTries int) bool {
	switch {
	case errors.Is(err, backend.ErrConflict):
		return true
	case status.Code(err) == codes.Unavailable:
		return unavailableTries < maxUnavailableTries
	}
	return false
}

// Retry pacing of Update.
const (
	// maxUnavailableTries is how many times Update tries after Unavailable
	// errors before it returns one (the client has retried each already).
	maxUnavailableTries = 4
	backoffBase         = 2 * time.Millisecond
	backoffCap          = 100 * time.Millisecond
)

// backoff sleeps a random time up to min(backoffCap, backoffBase·2^attempt)
// ("full jitter"), or until ctx is done, and returns ctx's error then.
func backoff(ctx context.Context, attempt int) error {
	d := backoffCap
	if attempt < 10 {
		d = min(backoffCap, backoffBase<<attempt)
	}
	t := time.NewTimer(rand.N(d) + time.Microsecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
