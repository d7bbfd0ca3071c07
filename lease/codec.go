package lease

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/leasesvc/leasesvc/backend"
)

// value is the JSON of backend.Row.Value. Its keys are those that stored rows
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

// EncodeRow splits r into the backend.Row a driver stores. Metadata is copied. It
// fails only on a Checkpoint or a candidate that does not encode as JSON.
func EncodeRow(r *Record) (backend.Row, error) {
	row := backend.Row{Name: r.Name, Holder: r.Holder, FencingToken: r.FencingToken, TTL: r.TTL,
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
	if reflect.ValueOf(&v).Elem().IsZero() {
		return row, nil // the value of most holdings: "{}", stored as nothing
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a checkpoint comes back as it was written, <, > and & included
	if err := enc.Encode(v); err != nil {
		return backend.Row{}, fmt.Errorf("lease: encode the stored value of %q: %w", r.Name, err)
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
func DecodeRow(row backend.Row) (*Record, error) {
	var v value
	if len(row.Value) > 0 {
		if err := json.Unmarshal(row.Value, &v); err != nil {
			return nil, fmt.Errorf("lease: decode the stored value of %q: %w", row.Name, err)
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
