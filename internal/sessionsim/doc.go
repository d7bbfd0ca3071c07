// Package sessionsim is a deterministic simulation of sessions
// (docs/contract.md §14) that runs the real code inside testing/synctest
// bubbles, driven by pgregory.net/rapid state machines (sim_test.go).
//
// What runs is the real code, end to end: three instances, each a
// session.Registry behind the httpapi handler and a net/http server, over
// one lease.Manager on the memory backend (whose server clock is the
// bubble's); agents that are internal/rawsession.Agent, speaking
// WebSocket (coder/websocket) through net/http's client; contenders and
// candidates that acquire, waiting, through the lease.Manager as a REST
// caller would. The rapid state machine acquires, releases and transfers
// through the agent, starts new agents, routes and cuts connections,
// holds, drops, duplicates and swaps frames, pauses and wakes instances,
// fails the backend for a while, answers the instances' backend calls
// late, stalls instances between two steps of an answer, starts
// candidates, and lets time pass. Half the worlds are short: a window of
// 200 ms to 1 s and a session lease TTL of 1 to 3 s, so that answers late
// past the TTL come within a few seconds.
//
// What is modelled:
//
//   - the network (net.go): in-memory TCP connections through a load
//     balancer that sends each new connection to the next instance (or
//     the one routed to). Each instance has a one-way latency (50 µs to
//     5 ms), for its connections, the events that reach it and its calls
//     to the backend. The bytes are cut into the HTTP upgrade and
//     WebSocket frames, and the faults act on frames: a connection is cut
//     (what was not read is lost) or dropped by its agent (a FIN: the
//     instance reads what was sent, then EOF), frames wait (per
//     connection and direction, or on the way to an instance, which still
//     completes upgrades) and are released in order, a held frame from
//     the agent is dropped, duplicated or swapped with the next (the
//     instance then closes the socket for a broken protocol), a held
//     frame to the agent is duplicated. Frames to the agent are never
//     dropped or reordered alone: TCP delivers in order or not at all,
//     and the service's ordering of lost before ack (S2) relies on it. The
//     agent's end of a connection reads a close frame before its end
//     (coder/websocket closes a socket, and clears the finalizer that
//     would close it from outside the bubble, only then);
//   - each instance's clock (clock.go), a session.Clock at its own rate
//     against the bubble's, within the drift margin (or outside it, with
//     SESSIONSIM_DRIFT, to see the checker catch what that breaks);
//   - pausing an instance, as SIGSTOP would: it reads no frame, writes
//     nothing to its sockets or the backend, accepts no connection, and no
//     timer of its clock fires, until it wakes (its clock runs on);
//   - Pub/Sub: every instance gets the backend's events, after its
//     latency, a paused one when it wakes;
//   - a backend outage: every call fails, for everyone, for a while;
//   - every answer can be late (late.go): the backend decides a call of
//     an instance (any session.Backend method) when it arrives and its
//     answer reaches the instance any time later, up to 1.5 × the session
//     lease TTL, or never when the call's context ends first; the machine
//     picks the instance, the method and how many calls. The instance's
//     renewals, the events and the other instances go on meanwhile;
//   - any push can fall between two steps of an operation: an instance
//     stalls, up to a window, between deciding an answer that starts a
//     holding (an acquire's result, a resume's leases) and queuing it,
//     where it signs the holding's proof (httpapi.Proofs), so that what it
//     pushes meanwhile (a renewal that finds the lease gone) goes out
//     first.
//
// What is not simulated: the real backends (Firestore, Spanner,
// PostgreSQL) and their clocks; an instance's death, restart or shutdown
// (move); operators' revokes; a backend that decides late (it decides
// every call when it arrives, only its answer is late); the Go SDK's
// client.Session (only rawsession's agent); and the order of goroutines
// within one instant, which the scheduler decides, not the seed. The
// latencies and the clock rates are distinct per instance, so that
// causally unrelated events fall on distinct instants; what still shares
// one (a tick of the agent's heartbeat ticker and the end of its resume,
// map iteration orders, requests the agent sends at once) may decide an
// outcome: an acquire answered after a release of its holding, the two at
// one instant, failed one run and passed the next (issue 44, found so and
// then scripted with late answers). SESSIONSIM_DUMP keeps the trace of
// such a run.
//
// The invariant (check.go) is that of docs/contract.md §14, "Every owner,
// in order": no holding of a lease, by another holder or with a new
// fencing token, begins (at the backend's decision) while an agent leads
// another holding of it, by the agent's deadline of rule A3 rebuilt from
// the frames it sent and received (Spec). It is checked at every holding
// that begins and at every change of what an agent leads, in the bubble's
// time, and the agent's own deadlines (the session's, and each holding's
// under A4) are checked against A3's after every step. The checker's agent follows rules A1–A3 and A6 only (an agent
// that also follows A4 and A5 leads less): with the service's rules S5
// and S6 it must be safe. It also checks the order of each socket: no lost
// or revoked push for a (name, fencing token) comes before the result that
// answers an acquire of that (name, token) sent on it before the push
// (S6). Every world is torn down at the end of its run: a session that
// never dies fails the run too.
package sessionsim
