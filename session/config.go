package session

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasesvc/leasesvc/internal/audit"
	"github.com/leasesvc/leasesvc/internal/hub"
)

// Window bounds and default (docs/contract.md §14).
const (
	MinWindow     = 200 * time.Millisecond
	MaxWindow     = 60 * time.Second
	DefaultWindow = time.Second
)

// Defaults of Config (the LEASESVC_SESSION_* settings of cmd/leasesvc).
const (
	DefaultLeaseTTL       = 30 * time.Second
	DefaultMaxSessions    = 900
	DefaultMaxPerCaller   = 100
	DefaultMaxLeases      = 1000
	DefaultMessageRate    = 200
	DefaultMaxMessage     = 1 << 20
	DefaultMaxAge         = 55 * time.Minute
	DefaultShutdownWindow = 10 * time.Second
	DefaultOpenTimeout    = 10 * time.Second
	DefaultOutBuffer      = 256 << 10
)

// safeFraction is the part of the TTL, counted from the send time of a
// successful write, that the instance relies on (drift margin 0.1).
const safeFraction = 0.9

// Config configures a Registry. The zero value of every field means its
// default.
type Config struct {
	// LeaseTTL is the shortest TTL of a session's leases in the backend;
	// a session's TTL is max(LeaseTTL, 3 × window). Default 30s.
	LeaseTTL time.Duration
	// MaxSessions caps the sessions of this instance, counting the
	// upgraded sockets not yet in a session (Registry.Admit). Default 900.
	MaxSessions int
	// MaxPerCaller caps the sessions of one caller (principal; client
	// address without authentication) on this instance, counting its
	// upgraded sockets not yet in a session. Default 100.
	MaxPerCaller int
	// MaxLeases caps the leases of one session. Default 1000.
	MaxLeases int
	// MessageRate caps the messages per second of one session's socket
	// (burst the same). Default 200.
	MessageRate int
	// MaxMessage is the largest message in bytes. Default 1 MiB.
	MaxMessage int64
	// MaxAge is how long a socket lives before it is asked to move.
	// Default 55m.
	MaxAge time.Duration
	// OpenTimeout is how long an upgraded socket may stay without sending
	// open or resume; then it is closed (LEASESVC_HEADER_TIMEOUT).
	// Default 10s.
	OpenTimeout time.Duration
	// OutBuffer bounds the bytes queued on one socket for a client that
	// reads slower than its answers come; past it the socket is closed
	// and its session lives on (LEASESVC_SESSION_OUT_BUFFER). A message is
	// queued while less than it is queued, so a queue holds at most it
	// and one message more. Default 256 KiB.
	OutBuffer int64
	// Events delivers the leadership events of every instance; the
	// Registry tells sessions of their leases' losses from it. Nil means
	// losses are found by the renewals only.
	Events *hub.Hub
	// Logger receives what the Registry cannot tell a client. Default
	// slog.Default().
	Logger *slog.Logger
	// Audit receives a line per open, resume, refusal and end (close,
	// expiry, move, lapse).
	Audit *audit.Log
	// Observer counts sessions for metrics; nil counts nothing.
	Observer Observer
	// Clock is the time the sessions read. Default the process's clock.
	Clock Clock
}

// Observer receives what the session metrics count (telemetry).
type Observer interface {
	// SessionsOpen adds delta to the sessions open on this instance.
	SessionsOpen(delta int64)
	// Heartbeat counts one heartbeat received.
	Heartbeat()
	// ExpiredReleases counts leases released because their session died.
	ExpiredReleases(n int64)
	// Resume counts one successful resume.
	Resume()
	// SessionEnded counts one session's end on this instance, by its kind:
	// "closed" (a close message), "expired" (no message for its window),
	// "moved" (resumed elsewhere), "shutdown" (ended at the instance's
	// shutdown, no message for its window) or "lapsed" (its record ran
	// out) (docs/contract.md §14, Session states).
	SessionEnded(kind string)
}

func (c Config) withDefaults() (Config, error) {
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxPerCaller == 0 {
		c.MaxPerCaller = DefaultMaxPerCaller
	}
	if c.MaxLeases == 0 {
		c.MaxLeases = DefaultMaxLeases
	}
	if c.MessageRate == 0 {
		c.MessageRate = DefaultMessageRate
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.OutBuffer == 0 {
		c.OutBuffer = DefaultOutBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	switch {
	case c.LeaseTTL < time.Second:
		return c, fmt.Errorf("session: Config.LeaseTTL %v must be at least 1s", c.LeaseTTL)
	case c.MaxSessions < 0, c.MaxPerCaller < 0, c.MaxLeases < 0, c.MessageRate < 0, c.MaxMessage < 0, c.OpenTimeout < 0:
		return c, errors.New("session: Config limits must not be negative")
	case c.MaxMessage < 4<<10:
		return c, fmt.Errorf("session: Config.MaxMessage %d must be at least 4096 bytes", c.MaxMessage)
	case c.OutBuffer < 4<<10:
		return c, fmt.Errorf("session: Config.OutBuffer %d must be at least 4096 bytes", c.OutBuffer)
	case c.MaxAge < time.Minute:
		return c, fmt.Errorf("session: Config.MaxAge %v must be at least 1m", c.MaxAge)
	}
	return c, nil
}

// TTL is the backend TTL of a session of window w: max(LeaseTTL, 3 × w).
func (c Config) TTL(w time.Duration) time.Duration { return max(c.LeaseTTL, 3*w) }

// recordTTLs is how many session lease TTLs the session record is written
// for: it only orders epochs (docs/contract.md §14 Long TTL), so it is
// renewed every third of that, in the round of the leases.
const recordTTLs = 10

// RecordTTL is the backend TTL of the record of a session of window w:
// recordTTLs × TTL(w) (300 s at the defaults).
func (c Config) RecordTTL(w time.Duration) time.Duration { return recordTTLs * c.TTL(w) }
