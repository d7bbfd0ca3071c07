package client

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Lease is a lease as the service answered it (docs/contract.md §1). Every time in it is
// the backend's; compare them with each other, never with a local clock.
type Lease struct {
	// Name is the lease's name, such as "team-a.scheduler".
	Name string
	// Holder is the current holder or, when Held is false, the last one.
	Holder string
	// FencingToken grows by exactly 1 with every new holding and is never
	// reused. Pass it with every write downstream.
	FencingToken int64
	// TTL is the lease duration the holder asked for (millisecond precision).
	TTL time.Duration
	// AcquireTime is the server time at which the current holding began.
	AcquireTime time.Time
	// RenewTime is the server time of the last acquire or renew.
	RenewTime time.Time
	// ExpireTime is the server time at which the holding ends unless renewed.
	ExpireTime time.Time
	// Held is ServerTime < ExpireTime when the answer was computed.
	Held bool
	// Remaining is ExpireTime − ServerTime, never negative (millisecond
	// precision). It is a duration on the server's clock at ServerTime, not
	// a deadline on the local clock: the SDK never uses it to decide when to
	// stop leading (see Elector).
	Remaining time.Duration
	// ServerTime is the backend's time at which this answer was decided.
	ServerTime time.Time
	// Transitions counts how many times the lease passed to a new holding.
	Transitions int64
	// Metadata is the JSON object the holder attached ({} when none).
	Metadata json.RawMessage
	// Principal is the authenticated principal that acquired the holding,
	// as the service knows it; empty when the service runs without
	// authentication. Holder is what the agent calls itself; Principal is
	// who the service says it is.
	Principal string
	// RevokedBy names the operator (principal) who ended the holding with
	// Revoke; empty unless the holding was ended by a revocation.
	RevokedBy string
	// RevokeReason is the reason the operator gave; empty unless the
	// holding was ended by a revocation.
	RevokeReason string

	// The succession fields (docs/contract.md §8). Each is zero when the
	// service answered none.

	// Priority is the priority the current (or last) holding was acquired
	// with, 0 … 1000.
	Priority int
	// Checkpoint is the JSON object a holding last wrote with a renew,
	// release or transfer; nil when none was ever written. It survives the
	// end of its holding: an acquire answers the checkpoint the next holder
	// inherits.
	Checkpoint json.RawMessage
	// CheckpointToken is the fencing token of the holding that wrote
	// Checkpoint; 0 when there is none.
	CheckpointToken int64
	// ReservedFor is the holder the free lease is reserved for (the best
	// waiting candidate after a holding ended, or a transfer's successor);
	// anyone else's acquire is refused with a *ReservedError. Empty when
	// the lease is open to anyone or held.
	ReservedFor string
	// ReservedUntil is the server time at which the reservation lapses, at
	// the latest; zero when ReservedFor is empty.
	ReservedUntil time.Time
	// YieldRequested is true when a waiting candidate with a strictly
	// higher priority asked the live holding to step down (preempt); the
	// holder should checkpoint and release. Nothing is taken by force.
	YieldRequested bool
	// YieldTo is the candidate the holding is asked to step down for; empty
	// unless YieldRequested.
	YieldTo string
	// Candidates is how many registered candidates wait for the lease.
	Candidates int
	// BestCandidatePriority is the priority of the best of them (the one a
	// reservation would name); meaningful when Candidates > 0.
	BestCandidatePriority int

	// Session is true when the holding is held through a session
	// (docs/contract.md §14); SessionWindow is then that session's window.
	Session       bool
	SessionWindow time.Duration

	// Proof is the fencing proof of the holding (docs/contract.md §17): a
	// compact JWS the service signed over the lease's name, fencing token,
	// holder and principal. Only answers that start or restart a holding
	// for the caller carry one (Acquire, a session's acquire and resume);
	// it is empty elsewhere and when the service signs none. Pass it, not
	// the bare FencingToken, to sinks that check it (package fence). It
	// lets its bearer write as the leader: it is printed and logged as
	// "[proof]", never in full.
	Proof Proof
}

// Proof is a fencing proof (a compact JWS). It prints and logs as
// "[proof]" (or "" when empty), so that a Lease in a log line does not
// hand the holding's write right to whoever reads the log; string(p) is
// the proof itself, to pass on.
type Proof string

// String returns "[proof]", or "" for no proof.
func (p Proof) String() string {
	if p == "" {
		return ""
	}
	return "[proof]"
}

// GoString is String, for %#v.
func (p Proof) GoString() string { return strconv.Quote(p.String()) }

// LogValue is String, for log/slog.
func (p Proof) LogValue() slog.Value { return slog.StringValue(p.String()) }

// leaseJSON is the wire form of a Lease.
type leaseJSON struct {
	Name         string          `json:"name"`
	Holder       string          `json:"holder"`
	FencingToken int64           `json:"fencingToken"`
	TTLMs        int64           `json:"ttlMs"`
	AcquireTime  time.Time       `json:"acquireTime"`
	RenewTime    time.Time       `json:"renewTime"`
	ExpireTime   time.Time       `json:"expireTime"`
	Held         bool            `json:"held"`
	RemainingMs  int64           `json:"remainingMs"`
	ServerTime   time.Time       `json:"serverTime"`
	Transitions  int64           `json:"transitions"`
	Metadata     json.RawMessage `json:"metadata"`
	Principal    string          `json:"principal,omitempty"`
	RevokedBy    string          `json:"revokedBy,omitempty"`
	RevokeReason string          `json:"revokeReason,omitempty"`

	Priority        int             `json:"priority,omitempty"`
	Checkpoint      json.RawMessage `json:"checkpoint,omitempty"`
	CheckpointToken int64           `json:"checkpointToken,omitempty"`
	ReservedFor     string          `json:"reservedFor,omitempty"`
	ReservedUntil   time.Time       `json:"reservedUntil,omitzero"`
	YieldRequested  bool            `json:"yieldRequested,omitempty"`
	YieldTo         string          `json:"yieldTo,omitempty"`
	Candidates      int             `json:"candidates,omitempty"`
	BestCandidate   *int            `json:"bestCandidatePriority,omitempty"`
	Session         bool            `json:"session,omitempty"`
	SessionWindowMs int64           `json:"sessionWindowMs,omitempty"`
	Proof           string          `json:"proof,omitempty"`
}

// MarshalJSON renders the lease as the API does.
func (l Lease) MarshalJSON() ([]byte, error) {
	md := l.Metadata
	if len(md) == 0 {
		md = json.RawMessage(`{}`)
	}
	b, err := json.Marshal(leaseJSON{
		Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, TTLMs: l.TTL.Milliseconds(),
		AcquireTime: l.AcquireTime, RenewTime: l.RenewTime, ExpireTime: l.ExpireTime, Held: l.Held,
		RemainingMs: l.Remaining.Milliseconds(), ServerTime: l.ServerTime, Transitions: l.Transitions, Metadata: md,
		Principal: l.Principal, RevokedBy: l.RevokedBy, RevokeReason: l.RevokeReason,
		Priority: l.Priority, Checkpoint: l.Checkpoint, CheckpointToken: l.CheckpointToken,
		ReservedFor: l.ReservedFor, ReservedUntil: l.ReservedUntil, YieldRequested: l.YieldRequested,
		YieldTo: l.YieldTo, Candidates: l.Candidates, BestCandidate: bestCandidate(l),
		Session: l.Session, SessionWindowMs: l.SessionWindow.Milliseconds(), Proof: string(l.Proof),
	})
	if err != nil {
		return nil, fmt.Errorf("lease %q: %w", l.Name, err)
	}
	return b, nil
}

// UnmarshalJSON parses the API's JSON form of a lease.
func (l *Lease) UnmarshalJSON(b []byte) error {
	var w leaseJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	*l = Lease{
		Name: w.Name, Holder: w.Holder, FencingToken: w.FencingToken, TTL: time.Duration(w.TTLMs) * time.Millisecond,
		AcquireTime: w.AcquireTime, RenewTime: w.RenewTime, ExpireTime: w.ExpireTime, Held: w.Held,
		Remaining: time.Duration(w.RemainingMs) * time.Millisecond, ServerTime: w.ServerTime,
		Transitions: w.Transitions, Metadata: w.Metadata,
		Principal: w.Principal, RevokedBy: w.RevokedBy, RevokeReason: w.RevokeReason,
		Priority: w.Priority, Checkpoint: w.Checkpoint, CheckpointToken: w.CheckpointToken,
		ReservedFor: w.ReservedFor, ReservedUntil: w.ReservedUntil, YieldRequested: w.YieldRequested,
		YieldTo: w.YieldTo, Candidates: w.Candidates,
		Session: w.Session, SessionWindow: time.Duration(w.SessionWindowMs) * time.Millisecond,
		Proof: Proof(w.Proof),
	}
	if w.BestCandidate != nil {
		l.BestCandidatePriority = *w.BestCandidate
	}
	return nil
}

// bestCandidate is the lease's bestCandidatePriority member: present
// exactly when candidates wait.
func bestCandidate(l Lease) *int {
	if l.Candidates == 0 {
		return nil
	}
	p := l.BestCandidatePriority
	return &p
}

// Page is one page of a List.
type Page struct {
	// Leases are in ascending byte order of name.
	Leases []Lease `json:"leases"`
	// NextPageToken asks for the next page; empty on the last page.
	NextPageToken string `json:"nextPageToken"`
}
