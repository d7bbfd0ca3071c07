// Package session keeps the sessions of one instance (docs/contract.md §14):
// an agent proves it is alive to this instance by heartbeats over a
// WebSocket, and the instance holds the agent's leases in the backend at a
// long TTL, renews them every third of it, and releases them all as soon as
// the heartbeats stop for the session's window.
//
// The Registry knows nothing of the wire: httpapi decodes the socket's
// messages and calls a Session's methods, and the Registry pushes what the
// agent must hear (a lease lost, revoked, asked to yield; move elsewhere)
// through the Conn the socket attached.
//
// A session's life is four phases (opening, live, ending with its kind,
// gone), and every change is one step of phase.go's transition function
// under the session's lock: the table of docs/contract.md §14, Session
// states.
//
// Safety rests on two rules. The instance acks a heartbeat only while it
// owns the session (no compare-and-set on the epoch failed) and every lease
// of the session, the session record included, is safe on the backend for
// at least one window beyond now by the instance's own safe deadline (the
// send time of its last successful write + TTL × 0.9). And it declares the
// session dead only a full window after the last message it received. The
// agent stops at (send time of its last acked heartbeat) + window × (1 −
// drift margin), which comes before both.
package session
