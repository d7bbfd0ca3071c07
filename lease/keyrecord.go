package lease

import "strings"

// KeyRecordPrefix begins the name of every proof key's record: the public
// half of an instance's signing key (docs/contract.md §17), a hidden
// internal lease like a session's record. No request acquires a name under
// it; the service writes these records through the backend directly.
const KeyRecordPrefix = "leasesvc.key."

// Reserved reports whether name is one of the service's own records that
// no route finds: a session's (SessionRecordPrefix) or a proof key's
// (KeyRecordPrefix).
func Reserved(name string) bool {
	return strings.HasPrefix(name, SessionRecordPrefix) || strings.HasPrefix(name, KeyRecordPrefix)
}
