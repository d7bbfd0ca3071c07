package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Row is a Record as a driver stores it: the fields that every driver
// keeps in columns (document fields) of its own, and Value, one encoded
// value that holds all the others. EncodeRow splits a Record into a Row
// and DecodeRow joins it back; a driver maps a Row onto its columns and
// never names the fields inside Value, so a new field of the lease that
// no driver indexes or queries changes this file and no driver.
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
	// Value is one JSON object holding every other field of the Record
	// (revocation, succession, checkpoint, reservation, deletion, session);
	// nil when they are all zero, so a record that uses none of them
	// stores nothing there. A driver stores it as it is, in one column,
	// and gives it back as it read it.
	Value []byte
	// Legacy are the columns that versions before Value held the
	// revocation wrote. EncodeRow leaves them empty, so a driver that
	// writes every field of a Row clears them; a driver reads them back
	// from its old columns, uninterpreted, and DecodeRow takes each one
	// that Value does not hold.
	Legacy Legacy
}

// Legacy holds what the columns that older versions wrote for fields
// that Value now holds contain (docs/architecture.md, "Adding a field to
// a lease"): a row written by such a version reads back with them.
type Legacy struct {
	RevokedBy    string
	RevokeReason string
}

// value is the JSON of Row.Value. Its keys are those that stored rows
// already hold (the succession state was stored as this object before the
// revocation joined it); a zero field is left out, so a record that never
// used it stores nothing for it.
type value struct {
	RevokedBy       string          `json:"revokedBy,omitempty"`
	RevokeReason    string          `json:"revokeReason,omitempty"`
	Priority        int             `json:"priority,omitempty"`
	Checkpoint      json.RawMessage `json:"checkpoint,omitempty"`
	CheckpointToken int64           `json:"checkpointToken,omitempty"`
	Candidates      []Candidate     `json:"candidates,omitempty"`
	ReservedFor     string          `json:"reservedFor,omitempty"`
	// ReservedPrincipal is omitted when "", as records written before it
	// existed are read: a reservation for the anonymous principal.
	ReservedPrincipal string    `json:"reservedPrincipal,omitempty"`
	ReservedUntil     time.Time `json:"reservedUntil,omitzero"` // UTC
	DeleteTime        time.Time `json:"deleteTime,omitzero"`    // UTC
	SessionKey        string    `json:"sessionKey,omitempty"`
	SessionEpoch      int64     `json:"sessionEpoch,omitempty"`
	SessionWindowMs   int64     `json:"sessionWindowMs,omitempty"`
}

// emptyValue is the JSON of a value whose fields are all zero.
var emptyValue = []byte("{}")

// EncodeRow splits r into the Row a driver stores. Metadata is copied. It
// fails only on a Checkpoint or a candidate that does not encode as JSON.
func EncodeRow(r *Record) (Row, error) {
	row := Row{Name: r.Name, Holder: r.Holder, FencingToken: r.FencingToken, TTL: r.TTL,
		AcquireTime: r.AcquireTime, RenewTime: r.RenewTime, ExpireTime: r.ExpireTime,
		Transitions: r.Transitions, Principal: r.Principal}
	if len(r.Metadata) > 0 {
		row.Metadata = bytes.Clone(r.Metadata)
	}
	v := value{RevokedBy: r.RevokedBy, RevokeReason: r.RevokeReason,
		Priority: r.Priority, Checkpoint: r.Checkpoint, CheckpointToken: r.CheckpointToken,
		Candidates: r.Candidates, ReservedFor: r.ReservedFor, ReservedPrincipal: r.ReservedPrincipal,
		ReservedUntil: r.ReservedUntil.UTC(), DeleteTime: r.DeleteTime.UTC(),
		SessionKey: r.SessionKey, SessionEpoch: r.SessionEpoch, SessionWindowMs: r.SessionWindow.Milliseconds()}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a checkpoint comes back as it was written, <, > and & included
	if err := enc.Encode(v); err != nil {
		return Row{}, fmt.Errorf("backend: encode the stored value of %q: %w", r.Name, err)
	}
	if b := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(b, emptyValue) {
		row.Value = b
	}
	return row, nil
}

// DecodeRow joins row back into the Record that EncodeRow split: the
// inverse of EncodeRow, for any Record whose times have the precision
// the driver stores and whose SessionWindow is whole milliseconds. Empty
// Metadata reads as nil. A field that row.Value does not hold takes the
// value of its row.Legacy column, if any.
func DecodeRow(row Row) (*Record, error) {
	var v value
	if len(row.Value) > 0 {
		if err := json.Unmarshal(row.Value, &v); err != nil {
			return nil, fmt.Errorf("backend: decode the stored value of %q: %w", row.Name, err)
		}
	}
	if v.RevokedBy == "" {
		v.RevokedBy = row.Legacy.RevokedBy
	}
	if v.RevokeReason == "" {
		v.RevokeReason = row.Legacy.RevokeReason
	}
	r := &Record{Name: row.Name, Holder: row.Holder, FencingToken: row.FencingToken, TTL: row.TTL,
		AcquireTime: row.AcquireTime, RenewTime: row.RenewTime, ExpireTime: row.ExpireTime,
		Transitions: row.Transitions, Principal: row.Principal,
		RevokedBy: v.RevokedBy, RevokeReason: v.RevokeReason,
		Priority: v.Priority, Checkpoint: v.Checkpoint, CheckpointToken: v.CheckpointToken,
		Candidates: v.Candidates, ReservedFor: v.ReservedFor, ReservedPrincipal: v.ReservedPrincipal,
		ReservedUntil: v.ReservedUntil, DeleteTime: v.DeleteTime,
		SessionKey: v.SessionKey, SessionEpoch: v.SessionEpoch, SessionWindow: time.Duration(v.SessionWindowMs) * time.Millisecond}
	if len(row.Metadata) > 0 {
		r.Metadata = row.Metadata
	}
	return r, nil
}
