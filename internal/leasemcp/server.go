package leasemcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
)

// Config configures a Server. Every field has a default.
type Config struct {
	// Holder is the identity under which the session holds its leases,
	// 1–256 printable characters; it must be unique among the sessions
	// (two sessions with one holder would share their leases). Default
	// client.DefaultHolder(): "{hostname}-{pid}".
	Holder string
	// TTL is the lease duration of an acquire or claim that names none,
	// whole milliseconds. Default 30s (docs/contract.md §7).
	TTL time.Duration
	// ReleaseTimeout bounds the releases at the end of the session. Default
	// 5s.
	ReleaseTimeout time.Duration
	// Version is the server version announced to the client. Default "dev".
	Version string
	// Logger receives a line for every holding gained, lost and released.
	// Default: no logging.
	Logger *slog.Logger
	// Keeper holds the server's leases (client.NewKeeper): through a
	// session (docs/contract.md §14), acquires, checkpoints and releases
	// travel over it and the service frees the leases within its window
	// when the process dies. The Server holds each lease with Keeper.Hold
	// and does not close it. Nil: a Keeper of plain renewals every TTL/3,
	// which the Server closes when its session ends.
	Keeper *client.Keeper
}

// Server is one MCP session's lease holder. Its zero value is not usable;
// call New.
type Server struct {
	c   *client.Client
	cfg Config
	srv *mcp.Server

	mu      sync.Mutex
	ss      *mcp.ServerSession
	closing bool                   // the session ended: adopt no more holdings
	held    map[string]*holding    // by lease name
	lost    []LostLease            // lost holdings not yet reported in a tool result
	stale   map[string]*holding    // lost holdings, released before a re-acquire of their lease
	busy    map[string]bool        // leases with a tool call in progress
	inputs  map[string]*inputCheck // by tool name; written only by New
	wg      sync.WaitGroup         // the holdings' watches
	ownK    bool                   // the Server built cfg.Keeper: it closes it
}

// New returns a Server that calls the service through c.
func New(c *client.Client, cfg Config) (*Server, error) {
	if c == nil {
		return nil, errors.New("leasemcp.New: client is nil")
	}
	if cfg.Holder == "" {
		cfg.Holder = client.DefaultHolder()
	}
	if n := len([]rune(cfg.Holder)); n > 256 || strings.IndexFunc(cfg.Holder, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return nil, fmt.Errorf("leasemcp.New: Config.Holder %q must be 1–256 printable characters", cfg.Holder)
	}
	if cfg.TTL == 0 {
		cfg.TTL = client.DefaultTTL
	}
	if cfg.TTL < time.Millisecond || cfg.TTL%time.Millisecond != 0 {
		return nil, fmt.Errorf("leasemcp.New: Config.TTL %v must be a positive whole number of milliseconds", cfg.TTL)
	}
	if cfg.ReleaseTimeout == 0 {
		cfg.ReleaseTimeout = 5 * time.Second
	}
	if cfg.ReleaseTimeout < 0 {
		return nil, fmt.Errorf("leasemcp.New: Config.ReleaseTimeout %v must not be negative", cfg.ReleaseTimeout)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	own := cfg.Keeper == nil
	if own {
		k, err := client.NewKeeper(context.Background(), c, client.KeeperConfig{
			PlainRenewals: true, TTL: cfg.TTL, ReleaseTimeout: cfg.ReleaseTimeout, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("leasemcp.New: %w", err)
		}
		cfg.Keeper = k
	}
	s := &Server{c: c, cfg: cfg, held: map[string]*holding{}, stale: map[string]*holding{}, busy: map[string]bool{},
		inputs: map[string]*inputCheck{}, ownK: own}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "leasectl", Title: "leasesvc leases", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions:       instructions(cfg.Holder, holdingMode(cfg.Keeper)),
		Logger:             slog.New(slog.DiscardHandler),
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	s.addTools()
	s.srv.AddReceivingMiddleware(s.checkInputs)
	s.addResources()
	return s, nil
}

// Holder returns the identity under which the session holds its leases.
func (s *Server) Holder() string { return s.cfg.Holder }

// Run serves one MCP session over t until the client ends it (EOF of its
// input, the connection gone) or ctx is cancelled, then releases every
// lease the session holds and returns. It returns nil for those ends, and
// the cause when the connection broke instead: a read error of its input
// or a write error of its output (with a LineTransport: "reading stdin:
// …", "writing stdout: …"). A failure to connect is an error too.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		s.shutdown()
		return fmt.Errorf("leasemcp: connect: %w", err)
	}
	s.mu.Lock()
	s.ss = ss
	s.mu.Unlock()
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	var broken error
	select {
	case <-ctx.Done():
		_ = ss.Close()
		<-ended
		s.cfg.Logger.Info("leasectl mcp: stopping", "cause", context.Cause(ctx))
	case err := <-ended:
		s.cfg.Logger.Info("leasectl mcp: session ended", "err", err)
		if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
			broken = fmt.Errorf("leasemcp: the session's connection broke: %w", err)
		}
	}
	s.shutdown()
	return broken
}

// shutdown releases every holding, waits for the watches to end and
// closes the Keeper if the Server built it.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closing = true
	hs := make([]*holding, 0, len(s.held))
	for _, h := range s.held {
		hs = append(hs, h)
	}
	clear(s.held)
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Go(func() {
			if err := s.release(h); err != nil {
				s.cfg.Logger.Warn("leasectl mcp: release at session end failed; the lease runs out at its TTL",
					"lease", h.name, "fencingToken", h.token, "err", err)
			}
		})
	}
	wg.Wait()
	s.wg.Wait()
	if s.ownK {
		s.cfg.Keeper.Close()
	}
}

// session returns the MCP session, once connected.
func (s *Server) session() *mcp.ServerSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ss
}

// claim marks name busy for one tool call; false when another call on it
// is in progress. done ends the call.
func (s *Server) claim(name string) (done func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[name] {
		return nil, false
	}
	s.busy[name] = true
	return func() {
		s.mu.Lock()
		delete(s.busy, name)
		s.mu.Unlock()
	}, true
}

func instructions(holder, mode string) string {
	return "Leases from leasesvc, held for you as holder " + holder + " by this server, which renews them in the " +
		"background: never renew. A lease is the right to act as the single leader or worker for what it names. " +
		"lease_acquire and lease_claim_next give a fencingToken and a proof (the service's signature of the holding): " +
		"pass the proof, never a bare token number, to every tool that writes as the holder, so that a store can " +
		"refuse a stale or invented one. Every result lists your holdings under \"held\". If one lists a lease under " +
		"\"lostLeases\", stop acting for it at once. Record progress with lease_checkpoint; on \"yieldRequests\", " +
		"checkpoint and release at a safe point. Release when done (done=true for a finished task); ending the " +
		"session releases everything. Leases are held " + mode + "."
}

// holdingMode says how the server holds its leases, for the agent and
// the log.
func holdingMode(k *client.Keeper) string {
	return fmt.Sprintf("%v: if this server dies, the service frees them within %v of the last confirmation "+
		"(ttlSeconds applies to plain renewals only)", k, k.Span())
}
