package fence

import "errors"

// Reason is the stable code of a refusal, the same in the Python
// (FenceError.reason) and TypeScript (FenceError.reason) SDKs: "missing",
// "malformed", "bad_signature", "unknown_key", "wrong_issuer",
// "other_lease", "stale", or "keys_unavailable" for any other error (the
// keys could not be read). It is "" for a nil error.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrMissing):
		return "missing"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrSignature):
		return "bad_signature"
	case errors.Is(err, ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, ErrIssuer):
		return "wrong_issuer"
	case errors.Is(err, ErrOtherLease):
		return "other_lease"
	case errors.Is(err, ErrStale):
		return "stale"
	}
	return "keys_unavailable"
}
