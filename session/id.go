package session

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"

	"github.com/leasesvc/leasesvc/lease"
)

// RecordPrefix starts the names of the session records, the service's own
// internal leases that httpapi hides.
const RecordPrefix = lease.SessionRecordPrefix

// newID returns a fresh session id: 256 random bits, base64url without
// padding (43 characters).
func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Key is the stored key of a session id: hex sha256 (64 characters). The id
// itself is a bearer secret and is never stored, logged or audited.
func Key(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// RecordName is the name of the session record of key.
func RecordName(key string) string { return lease.SessionRecordName(key) }

// validID reports whether id has the shape newID makes.
func validID(id string) bool {
	if len(id) != 43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil
}

// recordHolder is the holder of every session record.
const recordHolder = "session"
