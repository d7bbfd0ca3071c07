package client

import (
	"encoding/json"
	"fmt"
)

// outMsg is a message to the service (docs/contract.md §14).
type outMsg struct {
	Type         string          `json:"type"`
	ID           int64           `json:"id"`
	WindowMs     int64           `json:"windowMs,omitempty"`
	SessionID    string          `json:"sessionId,omitempty"`
	Epoch        int64           `json:"epoch,omitempty"`
	Leases       []resumeLease   `json:"leases,omitzero"`
	Name         string          `json:"name,omitempty"`
	Holder       string          `json:"holder,omitempty"`
	FencingToken int64           `json:"fencingToken,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	Checkpoint   json.RawMessage `json:"checkpoint,omitempty"`
	WaitMs       int64           `json:"waitMs,omitempty"`
	Priority     *int            `json:"priority,omitempty"`
	Preempt      bool            `json:"preempt,omitempty"`
	To           string          `json:"to,omitempty"`
	ToPrincipal  string          `json:"toPrincipal,omitempty"`
	ReserveMs    int64           `json:"reserveMs,omitempty"`
}

// resumeLease is a holding named in a resume.
type resumeLease struct {
	Name         string `json:"name"`
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
}

// inMsg is a message from the service.
type inMsg struct {
	Type         string          `json:"type"`
	Re           *int64          `json:"re"`
	SessionID    string          `json:"sessionId"`
	Epoch        int64           `json:"epoch"`
	WindowMs     int64           `json:"windowMs"`
	HeartbeatMs  int64           `json:"heartbeatMs"`
	LeaseTTLMs   int64           `json:"leaseTtlMs"`
	Leases       []Lease         `json:"leases"`
	Lost         []lostLease     `json:"lost"`
	Lease        *Lease          `json:"lease"`
	Problem      json.RawMessage `json:"problem"`
	Name         string          `json:"name"`
	FencingToken int64           `json:"fencingToken"`
	Reason       string          `json:"reason"`
	Operator     string          `json:"operator"`
	To           string          `json:"to"`

	// unvouched marks an acquire's, release's or transfer's result that
	// arrived on a socket after a resume began elsewhere
	// (Session.addHolding, Session.settle).
	unvouched bool
	// lostFirst is an acquire's result that came after a lost or revoked
	// push for its holding (sconn.lostEarly): the call fails with it.
	lostFirst error
}

// lostLease is a holding a resume could not take back.
type lostLease struct {
	Name         string `json:"name"`
	FencingToken int64  `json:"fencingToken"`
	Reason       string `json:"reason"`
}

// problem returns the error an error message carries.
func (m inMsg) problem() error {
	var p struct {
		Status int `json:"status"`
	}
	_ = json.Unmarshal(m.Problem, &p)
	if p.Status == 0 {
		p.Status = 500
	}
	err := problemFrom(p.Status, 0, m.Problem)
	if e, ok := err.(*Error); ok && e.Code == "lease_held" {
		return &HeldError{} // the problem named no lease: who holds it is unknown
	}
	return err
}

// conflictEpoch returns the session's epoch that a 409 session_conflict
// answered to a resume names, or 0.
func (m inMsg) conflictEpoch() int64 {
	var p struct {
		Code  string `json:"code"`
		Epoch int64  `json:"epoch"`
	}
	if m.Type != "error" || json.Unmarshal(m.Problem, &p) != nil || p.Code != "session_conflict" {
		return 0
	}
	return p.Epoch
}

// lostError is the loss of a holding that the service pushed.
func lostError(m inMsg) error {
	e := &Error{Status: 409, Code: "lease_lost", kind: ErrLost}
	if m.Type == "revoked" {
		e.Detail = fmt.Sprintf("revoked by %s: %s", m.Operator, m.Reason)
	} else {
		e.Detail = "the session was told it ended: " + m.Reason
	}
	return e
}
