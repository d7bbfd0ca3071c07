// Package wire is the JSON form of a lease (docs/contract.md §1) that the HTTP API
// answers with and the events carry, so both always agree.
package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// Lease is the wire form of a lease (docs/contract.md §1).
type Lease struct {
	Name         string          `json:"name"`
	Holder       string          `json:"holder"`
	FencingToken int64           `json:"fencingToken"`
	TTLMs        int64           `json:"ttlMs"`
	AcquireTime  string          `json:"acquireTime"`
	RenewTime    string          `json:"renewTime"`
	ExpireTime   string          `json:"expireTime"`
	Held         bool            `json:"held"`
	RemainingMs  int64           `json:"remainingMs"`
	ServerTime   string          `json:"serverTime"`
	Transitions  int64           `json:"transitions"`
	Metadata     json.RawMessage `json:"metadata"`
	Principal    string          `json:"principal,omitempty"`
	RevokedBy    string          `json:"revokedBy,omitempty"`
	RevokeReason string          `json:"revokeReason,omitempty"`
	// The succession fields of docs/contract.md §8; each is absent when
	// empty, so a caller that never sends a priority sees none of them.
	Priority        int             `json:"priority,omitempty"`
	Checkpoint      json.RawMessage `json:"checkpoint,omitempty"`
	CheckpointToken int64           `json:"checkpointToken,omitempty"`
	ReservedFor     string          `json:"reservedFor,omitempty"`
	ReservedUntil   string          `json:"reservedUntil,omitempty"`
	YieldRequested  bool            `json:"yieldRequested,omitempty"`
	YieldTo         string          `json:"yieldTo,omitempty"`
	Candidates      int             `json:"candidates,omitempty"`
	// BestCandidatePriority is the priority of the best waiting candidate,
	// present (0 included) whenever Candidates is.
	BestCandidatePriority *int `json:"bestCandidatePriority,omitempty"`
	// Session and SessionWindowMs are present only on a holding held
	// through a session (docs/contract.md §14); never the session id.
	Session         bool  `json:"session,omitempty"`
	SessionWindowMs int64 `json:"sessionWindowMs,omitempty"`
	// Proof is the holding's signed proof (docs/contract.md §17), only in
	// the answers that start or restart a holding for its holder (acquire,
	// resume); FromLease never sets it, so get, list, watch and events
	// never carry one.
	Proof string `json:"proof,omitempty"`
}

// emptyObject is the metadata of a lease that has none.
var emptyObject = json.RawMessage(`{}`)

// FromLease returns the wire form of l.
func FromLease(l lease.Lease) Lease {
	md := l.Metadata
	if len(md) == 0 {
		md = emptyObject
	}
	out := Lease{
		Name:         l.Name,
		Holder:       l.Holder,
		FencingToken: l.FencingToken,
		TTLMs:        l.TTL.Milliseconds(),
		AcquireTime:  FormatTime(l.AcquireTime),
		RenewTime:    FormatTime(l.RenewTime),
		ExpireTime:   FormatTime(l.ExpireTime),
		Held:         l.Held(),
		RemainingMs:  l.Remaining().Milliseconds(),
		ServerTime:   FormatTime(l.ServerTime),
		Transitions:  l.Transitions,
		Metadata:     md,
		Principal:    l.Principal,
		RevokedBy:    l.RevokedBy,
		RevokeReason: l.RevokeReason,

		Priority:        l.Priority,
		Checkpoint:      l.Checkpoint,
		CheckpointToken: l.CheckpointToken,
		YieldTo:         l.YieldTo(),
		Candidates:      l.CandidateCount(),
	}
	out.YieldRequested = out.YieldTo != ""
	if l.Session {
		out.Session, out.SessionWindowMs = true, l.SessionWindow.Milliseconds()
	}
	if p, ok := l.BestCandidatePriority(); ok {
		out.BestCandidatePriority = &p
	}
	if who, until := l.Reservation(); who != "" {
		out.ReservedFor, out.ReservedUntil = who, FormatTime(until)
	}
	return out
}

// ToLease parses the wire form back into a lease.
func (w Lease) ToLease() (lease.Lease, error) {
	l := lease.Lease{Record: lease.Record{Name: w.Name, Holder: w.Holder, FencingToken: w.FencingToken, TTL: time.Duration(w.TTLMs) * time.Millisecond, Transitions: w.Transitions, Metadata: w.Metadata, Principal: w.Principal, RevokedBy: w.RevokedBy, RevokeReason: w.RevokeReason,
		Priority: w.Priority, Checkpoint: w.Checkpoint, CheckpointToken: w.CheckpointToken, ReservedFor: w.ReservedFor}}
	l.Session, l.SessionWindow = w.Session, time.Duration(w.SessionWindowMs)*time.Millisecond
	if w.ReservedUntil != "" { // the reservation as it was seen, whatever made it
		t, err := time.Parse(time.RFC3339Nano, w.ReservedUntil)
		if err != nil {
			return lease.Lease{}, fmt.Errorf("wire: lease %q: reservedUntil: %w", w.Name, err)
		}
		l.ReservedUntil = t
	}
	for _, f := range []struct {
		dst *time.Time
		src string
	}{{&l.AcquireTime, w.AcquireTime}, {&l.RenewTime, w.RenewTime}, {&l.ExpireTime, w.ExpireTime}, {&l.ServerTime, w.ServerTime}} {
		t, err := time.Parse(time.RFC3339Nano, f.src)
		if err != nil {
			return lease.Lease{}, fmt.Errorf("wire: lease %q: %w", w.Name, err)
		}
		*f.dst = t
	}
	if string(l.Metadata) == "{}" {
		l.Metadata = nil
	}
	return l, nil
}

// FormatTime renders a server time as RFC 3339 in UTC with up to
// microsecond precision.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// List is the wire form of a page of leases.
type List struct {
	Leases        []Lease `json:"leases"`
	NextPageToken string  `json:"nextPageToken"`
}
