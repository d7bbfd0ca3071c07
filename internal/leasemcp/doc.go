// Package leasemcp serves leases to an LLM agent over the Model Context
// Protocol (docs/contract.md §12): the server behind `leasectl mcp`.
//
// An LLM cannot renew a lease every few seconds, and cannot be trusted to
// stop acting when it loses one; the process that serves its tools can. A
// Server holds every lease its agent acquires (lease_acquire,
// lease_claim_next) under one holder identity with the Go SDK's
// [client.Keeper] ([client.Keeper.Hold]: one acquire, then the Keeper
// keeps the holding, through its session or by renewing it every TTL/3;
// the safe deadline is the Holding's, docs/contract.md §2 and §14, on the
// Keeper's monotonic clock), and releases them all when the session ends. The agent only decides what to
// claim and passes the fencing token on.
//
// # Guarantees and limits
//
//   - Every tool result carries the fencing token of every lease the
//     session holds ("held"). A lease lost in the background — the
//     service ended it (another holder, a revocation, lease_lost to a
//     renew) or nothing confirmed it before its safe deadline — is taken out of "held" at once,
//     reported in the next tool result ("lostLeases", with a warning), and
//     announced by an MCP logging notification (level "error", logger
//     "leasectl", once the client has set a level) and a
//     notifications/resources/updated for its resource lease://held/{name}.
//   - No tool takes a fencing token, so nothing the agent sends can renew a
//     holding: acquiring a lease this session lost first releases the lost
//     holding (if the service still has it), so the agent always gets a new
//     token.
//   - The safe deadline is checked when a tool runs and by a timer: a
//     holding past it is reported lost even while the service cannot be
//     reached. A holding is handed to the agent only once its deadline
//     leaves room (Holding.Fresh after an acquire that waited).
//   - Session end (stdin closed, the client gone, SIGINT or SIGTERM)
//     releases everything held. A SIGKILLed leasectl releases nothing: its
//     leases run out at their TTL, and nobody else can hold them before.
//     A paused process (SIGSTOP, a suspended laptop) can outlive its safe
//     deadline: downstream systems must refuse fencing tokens lower than
//     the highest they have seen.
//   - A careless client does not end the session: over a LineTransport
//     (what `leasectl mcp` serves on), a line that is not a JSON-RPC
//     message, or is longer than its limit, is answered with a JSON-RPC
//     error (-32700 or -32600) and the next line is read; an id is kept
//     exactly or refused, never rounded. Run returns an error only when
//     the connection broke (a read or write error), not at EOF.
//
// # Tools for the hand
//
// Every tool carries the MCP spec's annotations (readOnlyHint,
// idempotentHint, destructiveHint, openWorldHint), so that a client can ask
// its user before the calls that end something (lease_release,
// lease_checkpoint) and not before the ones that only look. Arguments are
// checked against the tool's input schema before the MCP library sees them
// (input.go): a refusal names the argument and says in plain words what it
// accepts ("ttlSeconds must be a number between 1 and 3600; you gave 0"),
// where the library's schema checker would answer in JSON Schema terms.
//
// # Succession
//
// The tools expose the succession of docs/contract.md §8 without taking a
// decision for the agent. lease_acquire takes a priority (recorded on the
// holding; with waitSeconds the acquire waits as a registered candidate)
// and preempt; an acquire refused with lease_reserved is answered like one
// refused with lease_held (acquired=false, reservedFor, retryAfterSeconds);
// a new holding's result carries the checkpoint it inherits.
// lease_checkpoint writes a checkpoint at once with a renew of the
// holding, and lease_release can carry one (written by a renew before the
// release, so that a candidate taking the lease at the release cannot miss
// it). A yield request — a preempting candidate of higher priority — is
// listed in every result's yieldRequests (with a warning and a logging
// notification, level "warning") while the session holds the lease: the
// background renewal never steps down by itself. The Keeper's yield
// requests (Holding.YieldRequests) note a request; lease_checkpoint and
// lease_get refresh it from the service's answer.
//
// # Tasks
//
// lease_claim_next is the "claim a task" pattern of a swarm: the tasks are
// leases under a prefix (the names the caller passes, or else every lease
// that exists under the prefix), and a claim acquires the first one in
// name order that is neither held nor done. lease_release with done=true
// marks a task done for good by creating the marker lease "{name}.done"
// before releasing the task, and a claim checks the marker after its
// acquire, so a task is claimed again only when its holder gave it up
// without finishing it (released without done, or its session died).
package leasemcp
