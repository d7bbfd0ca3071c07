package firestore

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/backend"
)

// classify maps an error of the Firestore client to the backend sentinels,
// in one place:
//
//   - ctx done: ctx's own error (context.Canceled or
//     context.DeadlineExceeded), unwrapped;
//   - call (ctx bounded by the Store's call timeout) done while ctx is not:
//     backend.ErrUnavailable, since Firestore did not answer in time (the
//     client retries Unavailable by itself until then);
//   - Aborted, FailedPrecondition, AlreadyExists: backend.ErrConflict (a
//     precondition failed: the document changed since it was read);
//   - Canceled, DeadlineExceeded: context.Canceled, context.DeadlineExceeded,
//     unwrapped;
//   - everything else, Unavailable and ResourceExhausted first among them:
//     backend.ErrUnavailable, since the backend cannot serve the request
//     (a permission or configuration error is not a bug of the caller's).
//
// The native error stays reachable: fmt.Errorf("%w: %w", sentinel, err).
func classify(ctx, call context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if call.Err() != nil {
		return fmt.Errorf("backend/firestore: %s %q: %w: no answer within the call timeout: %w", op, name, backend.ErrUnavailable, err)
	}
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	switch status.Code(err) {
	case codes.Canceled:
		return context.Canceled
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case codes.Aborted, codes.FailedPrecondition, codes.AlreadyExists:
		return fmt.Errorf("backend/firestore: %s %q: %w", op, name, backend.Conflict("precondition", err))
	}
	return fmt.Errorf("backend/firestore: %s %q: %w: %w", op, name, backend.ErrUnavailable, err)
}
