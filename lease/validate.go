package lease

import (
	"bytes"
	"encoding/json"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits of docs/contract.md §1 that are not configurable.
const (
	// MaxNameLen is the longest lease name, in bytes (names are ASCII).
	MaxNameLen = 128
	// MaxHolderLen is the longest holder identity, in characters.
	MaxHolderLen = 256
	// MaxMetadataBytes is the largest metadata object, serialized compactly.
	MaxMetadataBytes = 16 << 10
	// MaxCheckpointBytes is the largest checkpoint object, serialized
	// compactly (docs/contract.md §8).
	MaxCheckpointBytes = 16 << 10
)

// ValidName reports whether s is a lease name: 1–128 characters of
// [A-Za-z0-9._-], starting with a letter or digit.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// validPrefix reports whether s can begin a lease name ("" included).
func validPrefix(s string) bool { return s == "" || ValidName(s) }

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func checkName(v *violations, name string) {
	if !ValidName(name) {
		v.add("name", "must be 1–%d characters of [A-Za-z0-9._-] starting with a letter or digit", MaxNameLen)
	}
}

func checkHolder(v *violations, holder string) {
	switch n := utf8.RuneCountInString(holder); {
	case n == 0:
		v.add("holder", "is required")
		return
	case n > MaxHolderLen:
		v.add("holder", "must be at most %d characters, got %d", MaxHolderLen, n)
		return
	case !utf8.ValidString(holder):
		v.add("holder", "must be valid UTF-8")
		return
	}
	for _, r := range holder {
		if !unicode.IsPrint(r) {
			v.add("holder", "must contain printable characters only, got %U", r)
			return
		}
	}
}

// MaxToken is the largest fencing token (and session epoch) the service
// accepts or hands out: 2⁵³ − 1, the largest integer a JavaScript number
// holds exactly, so that every SDK reads every token it is given
// (docs/contract.md §14, Operations in flight).
const MaxToken = 1<<53 - 1

func checkToken(v *violations, token int64) {
	if token < 1 || token > MaxToken {
		v.add("fencingToken", "must be an integer between 1 and %d", int64(MaxToken))
	}
}

func (m *Manager) checkTTL(v *violations, ttl time.Duration) {
	if ttl < m.cfg.MinTTL || ttl > m.cfg.MaxTTL {
		v.add("ttlMs", "must be between %d and %d", m.cfg.MinTTL.Milliseconds(), m.cfg.MaxTTL.Milliseconds())
	}
}

// normalizeMetadata checks that raw is a JSON object of at most
// MaxMetadataBytes once compacted, and returns it compacted.
func normalizeMetadata(v *violations, raw json.RawMessage) []byte {
	return normalizeObject(v, "metadata", raw, MaxMetadataBytes)
}

// normalizeCheckpoint checks a checkpoint like metadata (docs/contract.md §8);
// nil stays nil.
func normalizeCheckpoint(v *violations, raw json.RawMessage) []byte {
	if raw == nil {
		return nil
	}
	return normalizeObject(v, "checkpoint", raw, MaxCheckpointBytes)
}

// normalizeObject checks that raw, the request field named field, is a
// JSON object of at most limit bytes once compacted, and returns it
// compacted.
func normalizeObject(v *violations, field string, raw json.RawMessage, limit int) []byte {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		v.add(field, "must be a JSON object")
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		v.add(field, "must be a JSON object: %v", err)
		return nil
	}
	if buf.Len() > limit {
		v.add(field, "must be at most %d bytes serialized, got %d", limit, buf.Len())
		return nil
	}
	return buf.Bytes()
}

// ValidateAcquire checks req against docs/contract.md §1 and the Manager's bounds, and
// returns an *InvalidError naming every bad field, or nil.
func (m *Manager) ValidateAcquire(req AcquireRequest) error {
	_, err := m.checkAcquire(req)
	return err
}

func (m *Manager) checkAcquire(req AcquireRequest) (metadata []byte, err error) {
	var v violations
	checkName(&v, req.Name)
	checkReservedName(&v, req.Name, req.Session)
	checkHolder(&v, req.Holder)
	if req.Session != nil {
		checkSessionTTL(&v, req.TTL)
		checkSession(&v, req.Session, true)
	} else {
		m.checkTTL(&v, req.TTL)
	}
	if req.Metadata != nil {
		metadata = normalizeMetadata(&v, req.Metadata)
	}
	if req.Wait < 0 || req.Wait > m.cfg.MaxWait {
		v.add("waitMs", "must be between 0 and %d", m.cfg.MaxWait.Milliseconds())
	}
	if req.Priority < 0 || req.Priority > MaxPriority {
		v.add("priority", "must be between 0 and %d", MaxPriority)
	}
	if req.Preempt && req.Wait <= 0 {
		v.add("preempt", "needs waitMs > 0: only a waiting candidate can ask the holder to step down")
	}
	return metadata, v.err()
}

// ValidateRenew checks req like ValidateAcquire; a zero TTL keeps the
// holding's TTL.
func (m *Manager) ValidateRenew(req RenewRequest) error {
	_, _, err := m.checkRenew(req)
	return err
}

func (m *Manager) checkRenew(req RenewRequest) (metadata, checkpoint []byte, err error) {
	var v violations
	checkName(&v, req.Name)
	checkHolder(&v, req.Holder)
	checkToken(&v, req.FencingToken)
	switch {
	case req.Session != nil:
		checkSession(&v, req.Session, false)
		if req.TTL != 0 {
			checkSessionTTL(&v, req.TTL)
		}
	case req.TTL != 0:
		m.checkTTL(&v, req.TTL)
	}
	if req.Metadata != nil {
		metadata = normalizeMetadata(&v, req.Metadata)
	}
	checkpoint = normalizeCheckpoint(&v, req.Checkpoint)
	return metadata, checkpoint, v.err()
}

// ValidateRelease checks req like ValidateAcquire.
func ValidateRelease(req ReleaseRequest) error {
	_, err := checkRelease(req)
	return err
}

func checkRelease(req ReleaseRequest) (checkpoint []byte, err error) {
	var v violations
	checkName(&v, req.Name)
	checkHolder(&v, req.Holder)
	checkToken(&v, req.FencingToken)
	if req.Session != nil {
		checkSession(&v, req.Session, false)
	}
	checkpoint = normalizeCheckpoint(&v, req.Checkpoint)
	return checkpoint, v.err()
}
