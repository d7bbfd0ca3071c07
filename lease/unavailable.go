package lease

import "github.com/leasesvc/leasesvc/backend"

// The backend's failures, as the Manager's callers see them: a transport
// maps these and the sentinels of errors.go, and never imports the backend.
// They are the backend's own values, so errors.Is matches whichever a
// Manager's error wraps.
var (
	// ErrUnavailable reports that the backend could not be reached or was
	// overloaded: the request changed nothing and may be retried later.
	ErrUnavailable = backend.ErrUnavailable
	// ErrConflict reports that the backend gave up after its retries on
	// contention (a record kept changing between a read and its write):
	// the request changed nothing and may be retried.
	ErrConflict = backend.ErrConflict
)
