package sessionsim

import (
	"net/http"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
	"github.com/leasesvc/leasesvc/session"
)

// The few lines that follow the API of the code under test: the copy of
// this package run against the code before issue 36's fix (which had no
// session.Config.Clock and no rawsession.Agent.HTTPClient), or before
// issue 44's (no rawsession.Agent.LeaseDeadline: there, Deadline), differs
// from this one here only.

// newRegistry makes an instance's Registry over b, reading clock.
func newRegistry(b session.Backend, cfg session.Config, clock *Clock) (*session.Registry, error) {
	cfg.Clock = sessionClock{clock}
	return session.New(b, cfg)
}

// sessionClock is a Clock as a session.Clock.
type sessionClock struct{ *Clock }

func (c sessionClock) AfterFunc(d time.Duration, f func()) session.Timer { return c.after(d, f) }

// setHTTPClient makes a dial its sockets through c.
func setHTTPClient(a *rawsession.Agent, c *http.Client) { a.HTTPClient = c }

// maxAgents is how many agents one run may start, one after another.
const maxAgents = 3

// leaseDeadline is until when a leads its holding of name (A4).
func leaseDeadline(a *Agent, name string) time.Time { return a.LeaseDeadline(name) }
