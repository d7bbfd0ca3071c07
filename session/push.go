package session

import "github.com/leasesvc/leasesvc/lease"

// PushType names what the instance tells an agent unasked.
type PushType string

// The pushes of docs/contract.md §14.
const (
	// PushLost: a lease of the session ended; Reason says how.
	PushLost PushType = "lost"
	// PushRevoked: an operator revoked a lease of the session.
	PushRevoked PushType = "revoked"
	// PushYield: a preempting candidate asks for a lease of the session.
	PushYield PushType = "yield"
	// PushMove: the agent should resume on a new socket (Reason shutdown
	// or max_age), then close this one without a close message.
	PushMove PushType = "move"
	// PushEnded: the session no longer lives on this socket (it was
	// resumed elsewhere, or it died); the socket should close.
	PushEnded PushType = "ended"
)

// Reasons of PushLost.
const (
	LostReleased = lease.LostReleased
	LostRevoked  = lease.LostRevoked
	LostTaken    = lease.LostTaken
	LostExpired  = lease.LostExpired
	LostDeleted  = lease.LostDeleted
)

// Reasons of PushMove.
const (
	MoveShutdown = "shutdown"
	MoveMaxAge   = "max_age"
)

// Push is one message the instance sends an agent unasked.
type Push struct {
	Type         PushType
	Name         string
	FencingToken int64
	// Reason is the loss's (PushLost), the operator's (PushRevoked) or
	// the move's (PushMove).
	Reason string
	// Operator is who revoked (PushRevoked).
	Operator string
	// To is the candidate asking (PushYield).
	To string
}

// Conn is the socket a session lives on. Push must not block: a socket
// that cannot keep up closes itself.
type Conn interface {
	Push(Push)
}

// Claim is a lease an agent says it holds through the session it resumes.
type Claim struct {
	Name, Holder string
	FencingToken int64
}

// Lost is a claimed lease that the resume could not take over.
type Lost struct {
	Name         string
	FencingToken int64
	Reason       string
}
