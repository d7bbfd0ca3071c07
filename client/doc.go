// Package client is the Go SDK of leasesvc. It needs the standard library
// and golang.org/x/oauth2 (for the TokenSource interface) only; Google ID
// tokens come from the subpackage googleauth.
//
// A Client calls every operation of the HTTP API (docs/contract.md §4): Acquire (with
// an optional Wait), Renew, Release, Get, List and All (paging), Watch and
// WatchPrefix (streams of leadership events of one lease or of every lease
// under a prefix, which reconnect for as long as their context lives and
// resume after the last event read; an event, like an answer, is read up
// to MaxAnswerBytes), Transfer and, for operators, Revoke. Refusals come
// back as typed errors: errors.Is(err, ErrHeld) — with the current lease
// through errors.As on a *HeldError — ErrReserved (a *ReservedError), ErrLost, ErrNotFound, ErrInvalid,
// ErrUnavailable, ErrDenied (with ErrUnauthenticated and
// ErrPermissionDenied within it), ErrInternal. Transient failures
// (connection errors, per-attempt timeouts, 429, 502, 503, 504) are retried
// with capped, jittered exponential backoff, a 429 no earlier than its
// Retry-After (ErrRateLimited when that does not get through); that is safe
// for every operation but Revoke, because an acquire repeated by its
// holder, a repeated release and a repeated renew all return the same
// holding. Revoke retries only what the service did not act on.
//
// An Elector is what most agents want: Run(ctx) campaigns for a lease, calls
// OnStartedLeading(ctx) while this process leads (its Keeper keeps the
// holding: renewals every TTL/3 with jitter, or a session's heartbeats),
// and cancels that ctx at once on lease_lost and at the stop time
// (StopAt: the safe deadline less CancelBefore) when nothing confirms the
// holding, however the service fails. Retries of a failed acquire or
// renew back off, and after a 429 wait for the answer's Retry-After
// (sooner would be refused again). TokenFromContext gives the fencing
// token to pass with every write downstream.
//
// # Succession
//
// The succession of docs/contract.md §8 is in both layers. On the Client:
// AcquireRequest.Priority, Candidate and Preempt rank a (waiting) acquire;
// RenewRequest.Checkpoint and ReleaseWith write the checkpoint a successor
// inherits; Transfer hands a holding to a named successor; an acquire
// refused by a reservation for another is a *ReservedError (ErrReserved);
// and Lease carries Priority, Checkpoint, CheckpointToken, ReservedFor,
// ReservedUntil, YieldRequested, YieldTo, Candidates and BestCandidatePriority. On the Elector:
// ElectorConfig.Priority and Preempt, LeaderCallbacks.OnYieldRequested before it steps down
// for a preempting candidate (cause ErrYielded), Checkpoint and
// SetCheckpoint while leading, CheckpointFromContext for what a term
// inherited, and Transfer (cause ErrTransferred).
//
// # Sessions
//
// A Session (Client.OpenSession, docs/contract.md §14) holds leases
// through one WebSocket: it heartbeats every window/4 (window 1s by
// default, 200ms … 60s), the service renews its leases itself and ends them
// within a window of the agent's last heartbeat, so a crashed agent's
// leases free within the window rather than a TTL. Session.Deadline is the
// send time of the last acknowledged heartbeat + window × (1 −
// DriftMargin). A dropped socket reconnects and resumes (any instance); a
// move asked by the service resumes on a new socket before the old one is
// closed. A Session is one-shot: one the service ended (it expired, or a
// resume was refused because it no longer exists) never reopens itself;
// its holdings end with ErrLost and its requests fail with
// ErrSessionEnded (Session.Done, Session.Err). Against a service without
// sessions OpenSession returns ErrSessionsUnsupported.
//
// # Keepers
//
// A Keeper (NewKeeper) holds leases for one agent, by plain renewals or
// through a session, and is the only part of the package that knows which.
// The SDKs' lifecycle rules (sdk/conformance/PROTOCOL.md, L1–L4) are its:
//
//   - L1: it chooses its mode once, at NewKeeper: "session" unless
//     KeeperConfig.PlainRenewals asks for plain renewals (reason "asked"),
//     the service offers no sessions ("sessions_unsupported"), refuses one
//     at its session limit ("session_limit") or KeeperConfig.CancelBefore
//     does not fit the window ("window"). Keeper.Mode, PlainReason and
//     ModeInfo say which; KeeperConfig.OnMode is told once, and OnRetry of
//     every failure retried (opening the session, a renew), as typed
//     values.
//   - L2: when the service ends a session the Keeper opened (or the
//     Client's shared one), its holdings end with ErrLost and the Keeper
//     opens a new session at its next Hold; a Session given in
//     KeeperConfig is not reopened.
//   - L3: a CancelBefore fits a span when FitCancelBefore says so
//     (CancelBefore < SafeSpan(span, DriftMargin) − span/2); one that does
//     not is an error wrapping ErrInvalid, never capped; the default is
//     DefaultCancelBeforeFor(span). A term stops at StopAt(deadline,
//     CancelBefore).
//   - L4: every Holding it hands out (Keeper.Hold) is kept by it until it
//     is released, transferred or lost, its deadline passes, or the Keeper
//     closes: renewed every RenewInterval (TTL/3, jittered) with plain
//     renewals, by the session's heartbeats through a session. Keeper.Close
//     releases what it still holds (within ReleaseTimeout) and stops the
//     renewals.
//
// A Holding carries the safe deadline (Holding.Deadline: a send time plus
// SafeSpan), says when it moves (Changed) and when the holding ends (Done,
// Err), and renews (to write a checkpoint), releases and transfers over
// REST or the socket. An Elector campaigns and leads over a Keeper
// (NewElector(k, name, cfg)), and so do leasectl run and leasectl mcp;
// Client.NewElector(name, cfg) builds the default Keeper (the Client's
// shared session, falling back to plain renewals) for the Elector's Run
// and closes it when Run returns. Through a session every term ends at the
// session's deadline (less CancelBefore, by default a tenth of the window)
// whatever the socket says, a lost, revoked or yield push reaches the term
// at once, and checkpoints, transfers and the release travel over the
// socket.
//
// # Migrating from NewElector(c *Client, name, cfg)
//
// The Elector's holding settings moved to KeeperConfig: TTL, RenewInterval,
// RenewJitter, DriftMargin, RetryBackoff, ReleaseTimeout, Clock, Session
// and PlainRenewals. Build the Keeper with NewKeeper and pass it to
// NewElector(k, name, cfg) (ElectorConfig.Keeper is that argument now), or
// use c.NewElector(name, cfg) for the defaults. The callbacks moved into
// ElectorConfig.Callbacks (LeaderCallbacks). Holding is an interface
// (*Holding becomes Holding); Holding.RenewDue is gone (the Keeper renews
// every holding), and Keeper.Acquire is a deprecated alias of Hold.
// KeeperConfig.Fits became KeeperConfig.CancelBefore (FitCancelBefore).
//
// Package leadercache (a subpackage, which needs the Pub/Sub client)
// answers "who leads X" from memory, kept current by the service's events.
// It treats a revoked event as the end of a holding, like released, and a
// deleted lease (Client.Delete, docs/contract.md §15) as one that never
// existed.
//
// # Credentials
//
// Config.TokenSource gives each request "Authorization: Bearer {token}".
// StaticToken wraps a token you already have; googleauth.IDTokenSource
// gives Google-signed ID tokens for the service's URL on Cloud Run, GCE and
// GKE (the metadata server) or with a service-account key. 401 is
// ErrUnauthenticated and 403 ErrPermissionDenied; neither is retried. A
// token source that fails fails the call with ErrCredentials.
//
// # Time
//
// The SDK never compares a local clock with a server timestamp. A holder's
// safe deadline is (local monotonic time when it sent the acquire or renew
// that succeeded) + TTL × (1 − DriftMargin): the service decided the
// holding's expiry after that send, so the holder stops before anyone else
// can start, as long as the two clocks run at rates within the margin and
// the process is not paused. Pauses (GC, swap, a suspended VM) are why
// fencing tokens exist: downstream systems must refuse a token lower than
// the highest they have seen.
package client
