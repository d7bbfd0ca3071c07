package auth

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnauthenticated is wrapped by every error that means the request's
// credentials are missing, malformed, unknown, expired or otherwise invalid.
// The HTTP layer answers 401 unauthenticated.
var ErrUnauthenticated = errors.New("auth: unauthenticated")

// ErrUnavailable is wrapped by errors that mean the credentials could not be
// verified right now, for example because Google's signing certificates
// could not be fetched. The HTTP layer answers 503; a retry may succeed.
var ErrUnavailable = errors.New("auth: credentials cannot be verified right now")

// FileError is one problem in a tokens file or a policy file. ParseStatic and
// ParsePolicy report every problem they find at once, as the errors.Join of
// *FileError values; use errors.As to get the first one.
type FileError struct {
	// File is the file name given to the parser.
	File string
	// Line is the 1-based line of the problem.
	Line int
	// Column is the 1-based column of the problem, counted in characters
	// (not bytes). It is 1 when only the line is known (YAML syntax errors).
	Column int
	// Path locates the problem in the document, for example
	// "grants[1].verbs[0]"; it is empty when the problem is the document
	// itself (syntax, emptiness).
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error formats e as "FILE:LINE:COL: PATH: MSG", or "FILE:LINE:COL: MSG"
// when e has no path.
func (e *FileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Path, e.Msg)
}

// redacted wraps an error whose text might contain a secret, replacing each
// occurrence of the secret in the text. Unwrap still reaches the original.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// redact returns err with every occurrence of secret in its text replaced by
// "[REDACTED]".
func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), secret, "[REDACTED]"), err: err}
}
