package backend

import (
	"encoding/json"
	"time"
)

// Row is a lease as a driver stores it: the fields that every driver
// keeps in columns (document fields) of its own, and Value, one encoded
// value that holds all the others. Package lease splits its Record into a
// Row (lease.EncodeRow) and joins it back (lease.DecodeRow); a driver maps
// a Row onto its columns and never names the fields inside Value, so a new
// field of the lease that no driver indexes or queries changes package
// lease and no driver.
//
// The columns are the fields that each driver's table has had from its
// first version: the key (Name), the expire time its expiry index orders
// by (ExpireTime, for ExpiryScanner), and the holding's own fields, which
// operators read in the table and which stay where rows already hold them.
type Row struct {
	Name         string
	Holder       string
	FencingToken int64
	TTL          time.Duration
	AcquireTime  time.Time
	RenewTime    time.Time
	ExpireTime   time.Time
	Transitions  int64
	// Metadata is the holder's JSON object as written; empty for none.
	Metadata  json.RawMessage
	Principal string
	// Value is one JSON object holding every other field of the lease
	// (revocation, succession, checkpoint, reservation, deletion, session);
	// nil when they are all zero, so a lease that uses none of them
	// stores nothing there. A driver stores it as it is, in one column,
	// and gives it back as it read it.
	Value []byte
	// Legacy are the columns that versions before Value held the
	// revocation wrote. lease.EncodeRow leaves them empty, so a driver that
	// writes every field of a Row clears them; a driver reads them back
	// from its old columns, uninterpreted, and lease.DecodeRow takes each
	// one that Value does not hold.
	Legacy Legacy
}

// Legacy holds what the columns that older versions wrote for fields
// that Value now holds contain (docs/architecture.md, "Adding a field to
// a lease"): a row written by such a version reads back with them.
type Legacy struct {
	RevokedBy    string
	RevokeReason string
}
