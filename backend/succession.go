package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// succession is the stored JSON form of a Record's succession fields.
type succession struct {
	Priority        int             `json:"priority,omitempty"`
	Checkpoint      json.RawMessage `json:"checkpoint,omitempty"`
	CheckpointToken int64           `json:"checkpointToken,omitempty"`
	Candidates      []Candidate     `json:"candidates,omitempty"`
	ReservedFor     string          `json:"reservedFor,omitempty"`
	// ReservedPrincipal is omitted when "", as records written before it
	// existed are read: a reservation for the anonymous principal.
	ReservedPrincipal string     `json:"reservedPrincipal,omitempty"`
	ReservedUntil     *time.Time `json:"reservedUntil,omitempty"`
	DeleteTime        *time.Time `json:"deleteTime,omitempty"`
	// The session fields (docs/contract.md §14); the window in
	// milliseconds.
	SessionKey      string `json:"sessionKey,omitempty"`
	SessionEpoch    int64  `json:"sessionEpoch,omitempty"`
	SessionWindowMs int64  `json:"sessionWindowMs,omitempty"`
}

// MarshalSuccession returns the succession fields of r (docs/contract.md §8),
// its DeleteTime (§15) and its session fields (§14), as one JSON object, for a backend to store in a single column or field;
// nil when they are all zero, so records that never used succession store
// nothing new.
func MarshalSuccession(r *Record) ([]byte, error) {
	s := succession{Priority: r.Priority, Checkpoint: r.Checkpoint, CheckpointToken: r.CheckpointToken,
		Candidates: r.Candidates, ReservedFor: r.ReservedFor, ReservedPrincipal: r.ReservedPrincipal,
		SessionKey: r.SessionKey, SessionEpoch: r.SessionEpoch, SessionWindowMs: r.SessionWindow.Milliseconds()}
	if !r.ReservedUntil.IsZero() {
		t := r.ReservedUntil.UTC()
		s.ReservedUntil = &t
	}
	if !r.DeleteTime.IsZero() {
		t := r.DeleteTime.UTC()
		s.DeleteTime = &t
	}
	if s.Priority == 0 && len(s.Checkpoint) == 0 && s.CheckpointToken == 0 && len(s.Candidates) == 0 && s.ReservedFor == "" && s.ReservedPrincipal == "" && s.ReservedUntil == nil && s.DeleteTime == nil &&
		s.SessionKey == "" && s.SessionEpoch == 0 && s.SessionWindowMs == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a checkpoint comes back as it was written, <, > and & included
	if err := enc.Encode(s); err != nil {
		return nil, fmt.Errorf("backend: marshal succession of %q: %w", r.Name, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalSuccession sets the succession fields of r from what
// MarshalSuccession returned; empty data sets them all to zero.
func UnmarshalSuccession(data []byte, r *Record) error {
	var s succession
	if len(data) > 0 {
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("backend: succession of %q: %w", r.Name, err)
		}
	}
	r.Priority, r.Checkpoint, r.CheckpointToken, r.Candidates, r.ReservedFor = s.Priority, s.Checkpoint, s.CheckpointToken, s.Candidates, s.ReservedFor
	r.ReservedPrincipal = s.ReservedPrincipal
	r.ReservedUntil = time.Time{}
	if s.ReservedUntil != nil {
		r.ReservedUntil = *s.ReservedUntil
	}
	r.DeleteTime = time.Time{}
	if s.DeleteTime != nil {
		r.DeleteTime = *s.DeleteTime
	}
	r.SessionKey, r.SessionEpoch = s.SessionKey, s.SessionEpoch
	r.SessionWindow = time.Duration(s.SessionWindowMs) * time.Millisecond
	return nil
}
