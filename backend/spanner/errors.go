package spanner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/leasesvc/leasesvc/backend"
)

// Reasons a read-write transaction is retried, as passed to the WithRetryHook
// function.
const (
	// RetryAborted is Spanner aborting a transaction that lost a lock to
	// another (the client retries these itself first).
	RetryAborted = "aborted"
	// RetryEmulatorInvalidTransaction is the emulator's FailedPrecondition
	// "Invalid transaction ID" for a transaction that overlapped another:
	// the emulator runs one read-write transaction at a time.
	RetryEmulatorInvalidTransaction = "emulator_invalid_transaction"
	// RetryEmulatorTransactionNotFound is the emulator's NotFound
	// "Transaction not found" for the same situation.
	RetryEmulatorTransactionNotFound = "emulator_transaction_not_found"
	// RetryEmulatorTransactionEnded is the emulator's FailedPrecondition
	// "Cannot read or query using a transaction after it has been committed
	// or rolledback", for a transaction it ended because another began.
	RetryEmulatorTransactionEnded = "emulator_transaction_ended"
)

// classify maps an error of the Spanner client to the error a Store
// returns; a transaction that lost a race and may run again is a
// backend.Conflict with the reason to retry it. It is the one place that
// reads gRPC codes:
//
//   - Aborted, and the emulator's FailedPrecondition "Invalid transaction ID"
//     or "Cannot read or query using a transaction after it has been
//     committed or rolledback" and NotFound "Transaction not found": a
//     conflict (backend.ErrConflict), to retry;
//   - Unavailable, ResourceExhausted, and what leaves the service unable to
//     reach its data until someone acts (PermissionDenied, Unauthenticated,
//     NotFound: the database or table is gone; Internal):
//     backend.ErrUnavailable;
//   - DeadlineExceeded, Canceled: context.DeadlineExceeded, context.Canceled,
//     bare (never wrapped);
//   - anything else (InvalidArgument, FailedPrecondition, …, errors without
//     a gRPC code): the native error with what failed; a bug, not a state
//     of the backend.
//
// A sentinel wraps the native error, so both stay reachable with errors.Is
// and errors.As.
func classify(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	var retry string
	desc := strings.ToLower(spanner.ErrDesc(err))
	switch code := spanner.ErrCode(err); {
	case code == codes.Canceled:
		return context.Canceled
	case code == codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case code == codes.Aborted:
		retry = RetryAborted
	case code == codes.FailedPrecondition && strings.Contains(desc, "invalid transaction id"):
		retry = RetryEmulatorInvalidTransaction
	case code == codes.FailedPrecondition && strings.Contains(desc, "after it has been committed or rolledback"):
		retry = RetryEmulatorTransactionEnded
	case code == codes.NotFound && strings.Contains(desc, "transaction not found"):
		retry = RetryEmulatorTransactionNotFound
	case code == codes.Unavailable, code == codes.ResourceExhausted, code == codes.PermissionDenied,
		code == codes.Unauthenticated, code == codes.NotFound, code == codes.Internal:
		return fmt.Errorf("spanner: %s: %w: %w", what, backend.ErrUnavailable, err)
	default:
		return fmt.Errorf("spanner: %s: %w", what, err)
	}
	return fmt.Errorf("spanner: %s: %w", what, backend.Conflict(retry, err))
}
