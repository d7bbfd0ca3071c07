package main

import (
	"errors"
	"fmt"

	"github.com/leasesvc/leasesvc/client"
)

// Exit statuses (see the package doc).
const (
	exitFailure     = 1
	exitUsage       = 2
	exitHeld        = 3
	exitLost        = 4
	exitNotFound    = 5
	exitUnavailable = 6 // rate limited (429) after retries too
	exitDenied      = 7 // unauthenticated, permission denied, or no credentials
)

// exitError carries an exit status; quiet ones print nothing (CMD's own
// status passed through by run).
type exitError struct {
	code  int
	quiet bool
	err   error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is a mistake in the command line.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode maps an error to the process's exit status.
func exitCode(err error) int {
	var ex *exitError
	switch {
	case errors.As(err, &ex):
		return ex.code
	case errors.Is(err, client.ErrDenied), errors.Is(err, client.ErrCredentials):
		return exitDenied
	case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrReserved):
		return exitHeld
	case errors.Is(err, client.ErrLost):
		return exitLost
	case errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrUnavailable):
		return exitUnavailable
	}
	return exitFailure
}
