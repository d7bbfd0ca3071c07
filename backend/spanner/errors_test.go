package spanner

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/backend"
)

func TestClassify(t *testing.T) {
	grpcErr := func(c codes.Code, msg string) error { return spanner.ToSpannerError(status.Error(c, msg)) }
	cases := []struct {
		name     string
		err      error
		retry    string
		sentinel error // errors.Is(out, sentinel); nil: no sentinel at all
		bare     bool  // out must be sentinel itself
	}{
		{"nil", nil, "", nil, true},
		{"aborted", grpcErr(codes.Aborted, "Transaction was aborted."), RetryAborted, backend.ErrConflict, false},
		{"emulator invalid id", grpcErr(codes.FailedPrecondition, "Invalid transaction ID. Transaction ID must be >= 39"), RetryEmulatorInvalidTransaction, backend.ErrConflict, false},
		{"emulator not found", grpcErr(codes.NotFound, "Transaction not found: 51"), RetryEmulatorTransactionNotFound, backend.ErrConflict, false},
		{"emulator ended", grpcErr(codes.FailedPrecondition, "Cannot read or query using a transaction after it has been committed or rolledback."), RetryEmulatorTransactionEnded, backend.ErrConflict, false},
		{"unavailable", grpcErr(codes.Unavailable, "connection refused"), "", backend.ErrUnavailable, false},
		{"resource exhausted", grpcErr(codes.ResourceExhausted, "too many requests"), "", backend.ErrUnavailable, false},
		{"deadline", grpcErr(codes.DeadlineExceeded, "deadline"), "", context.DeadlineExceeded, true},
		{"canceled", grpcErr(codes.Canceled, "canceled"), "", context.Canceled, true},
		{"context canceled", fmt.Errorf("query: %w", context.Canceled), "", context.Canceled, true},
		{"context deadline", context.DeadlineExceeded, "", context.DeadlineExceeded, true},
		{"database not found", grpcErr(codes.NotFound, "Database not found: projects/p/instances/i/databases/d"), "", backend.ErrUnavailable, false},
		{"permission denied", grpcErr(codes.PermissionDenied, "no"), "", backend.ErrUnavailable, false},
		{"unauthenticated", grpcErr(codes.Unauthenticated, "no token"), "", backend.ErrUnavailable, false},
		{"internal", grpcErr(codes.Internal, "RST_STREAM"), "", backend.ErrUnavailable, false},
		{"other failed precondition", grpcErr(codes.FailedPrecondition, "Table not found"), "", nil, false},
		{"invalid argument", grpcErr(codes.InvalidArgument, "Value too long"), "", nil, false},
		{"not grpc", errors.New("decode column 3: bad"), "", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := classify("update \"x\"", tc.err)
			if retry := backend.ConflictReason(out); tc.retry != "" && retry != tc.retry {
				t.Errorf("retry = %q, want %q", retry, tc.retry)
			}
			switch {
			case tc.err == nil:
				if out != nil {
					t.Errorf("classify(nil) = %v", out)
				}
				return
			case tc.bare:
				if out != tc.sentinel {
					t.Errorf("out = %#v, want %v itself", out, tc.sentinel)
				}
				return
			case tc.sentinel != nil && !errors.Is(out, tc.sentinel):
				t.Errorf("out = %v, want it to wrap %v", out, tc.sentinel)
			case tc.sentinel == nil && (errors.Is(out, backend.ErrConflict) || errors.Is(out, backend.ErrUnavailable)):
				t.Errorf("out = %v wraps a sentinel, want none", out)
			}
			if !errors.Is(out, tc.err) {
				t.Errorf("out = %v does not wrap the native error", out)
			}
			if c := spanner.ErrCode(tc.err); c != codes.Unknown && spanner.ErrCode(out) != c {
				t.Errorf("gRPC code of out = %v, want %v", spanner.ErrCode(out), c)
			}
			if want := `spanner: update "x": `; len(out.Error()) < len(want) || out.Error()[:len(want)] != want {
				t.Errorf("out = %q, want it to start with %q", out, want)
			}
		})
	}
}
