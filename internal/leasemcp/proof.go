package leasemcp

import (
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// proofOf returns the proof the service signed for the holding l (a
// compact JWS, docs/contract.md §17), "" when it gave none. It goes to
// the agent in full, in tool results: the agent is the holder.
func proofOf(l client.Lease) string { return string(l.Proof) }

// window is the window of the session the server holds its leases
// through; 0 with plain renewals.
func (s *Server) window() time.Duration { return s.cfg.Keeper.Window() }

// windowSeconds is window in seconds, for a tool result.
func (s *Server) windowSeconds() float64 { return s.window().Seconds() }

// ttlNote tells the agent that the ttlSeconds it gave does not apply to a
// holding through a session ("" when it gave none, or with plain
// renewals): the service holds the lease at its own session TTL and frees
// it within the window if this server dies.
func (s *Server) ttlNote(ttlSeconds float64) string {
	if ttlSeconds == 0 || s.window() == 0 {
		return ""
	}
	return fmt.Sprintf(" ttlSeconds does not apply: this server holds your leases through a session, and the service frees them within %s seconds if it dies.",
		num(s.windowSeconds()))
}
