package leasemcp

import (
	"encoding/json"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// Status is part of every tool result: what the session holds now, and the
// holdings it lost since the previous result.
type Status struct {
	// Warning is set when LostLeases or YieldRequests is not empty.
	Warning string `json:"warning,omitempty" jsonschema:"set when a lease was lost since the previous result (read lostLeases and stop acting as their holder) or when another agent asks for a lease you hold (read yieldRequests)"`
	// LostLeases are the holdings lost in the background since the
	// previous tool result; each is reported once.
	LostLeases []LostLease `json:"lostLeases,omitempty" jsonschema:"holdings lost since the previous tool result; stop acting as their holder at once, and do not use their fencing tokens again"`
	// YieldRequests are the holdings of the session that a waiting
	// candidate of higher priority asks for (docs/contract.md §8); each is
	// listed while the session holds it. Nothing is released by itself.
	YieldRequests []YieldRequest `json:"yieldRequests,omitempty" jsonschema:"leases you hold that another agent of higher priority asks for: reach a safe point, record your progress with lease_checkpoint, then call lease_release so that it takes over; you keep the lease until you release it"`
	// Held lists every lease the session holds now, with its token.
	Held []HeldToken `json:"held" jsonschema:"every lease this session holds now, with the fencing token to pass on"`
}

// YieldRequest is a holding of the session that a preempting candidate
// asks for.
type YieldRequest struct {
	Name         string `json:"name" jsonschema:"the lease name"`
	FencingToken int64  `json:"fencingToken" jsonschema:"the token of your holding, still valid until you release it"`
	YieldTo      string `json:"yieldTo" jsonschema:"the holder that asks for the lease"`
}

// HeldToken names one holding of the session.
type HeldToken struct {
	Name         string `json:"name" jsonschema:"the lease name"`
	FencingToken int64  `json:"fencingToken" jsonschema:"the holding's fencing token"`
	// Proof is the service's signed proof of the holding (a compact JWS,
	// docs/contract.md §17), when the service gave one.
	Proof string `json:"proof,omitempty" jsonschema:"the service's signed proof of the holding: pass it, never the bare token, to tools that write"`
}

// LostLease is a holding lost in the background.
type LostLease struct {
	Name         string `json:"name" jsonschema:"the lease name"`
	FencingToken int64  `json:"fencingToken" jsonschema:"the token of the lost holding: it is no longer valid"`
	Reason       string `json:"reason" jsonschema:"why the holding was lost"`
}

// HeldLease is one holding of the session in detail.
type HeldLease struct {
	Name         string  `json:"name" jsonschema:"the lease name"`
	FencingToken int64   `json:"fencingToken" jsonschema:"the holding's fencing token: pass it with every write you make as the holder"`
	Holder       string  `json:"holder" jsonschema:"the holder identity of this session"`
	Proof        string  `json:"proof,omitempty" jsonschema:"the service's signed proof of the holding: pass it to tools that write"`
	TTLSeconds   float64 `json:"ttlSeconds,omitempty" jsonschema:"with plain renewals: the lease duration, renewed every third of it"`
	// WindowSeconds is the session's window when the holding is held
	// through a session (TTLSeconds does not apply then).
	WindowSeconds float64 `json:"windowSeconds,omitempty" jsonschema:"through a session: the lease is freed within this many seconds if this server dies"`
	AcquireTime   string  `json:"acquireTime" jsonschema:"the lease service's time (RFC 3339) when the holding began"`
	Renewing      bool    `json:"renewing" jsonschema:"true: the holding is confirmed and renewed in the background until you release it"`
	Priority      int     `json:"priority,omitempty" jsonschema:"the priority the holding was acquired with"`
	YieldTo       string  `json:"yieldTo,omitempty" jsonschema:"set when a waiting agent of higher priority asks for the lease: checkpoint your progress and release it"`
}

// LeaseView is a lease as the service reports it.
type LeaseView struct {
	Name             string         `json:"name" jsonschema:"the lease name"`
	Holder           string         `json:"holder" jsonschema:"the current holder or, when held is false, the last one"`
	Held             bool           `json:"held" jsonschema:"whether someone holds it now"`
	FencingToken     int64          `json:"fencingToken" jsonschema:"the token of the current (or last) holding"`
	TTLSeconds       float64        `json:"ttlSeconds" jsonschema:"the lease duration the holder asked for"`
	ExpireTime       string         `json:"expireTime" jsonschema:"the lease service's time (RFC 3339) at which the holding ends unless renewed"`
	RemainingSeconds float64        `json:"remainingSeconds" jsonschema:"seconds left until expireTime when the service answered"`
	Transitions      int64          `json:"transitions" jsonschema:"how many holdings the lease has had"`
	Metadata         map[string]any `json:"metadata,omitempty" jsonschema:"the JSON object the holder attached"`
	HeldByMe         bool           `json:"heldByMe" jsonschema:"true when this session holds it (with the token in fencingToken)"`
	Priority         int            `json:"priority,omitempty" jsonschema:"the priority of the current (or last) holding, 0–1000"`
	CheckpointToken  int64          `json:"checkpointToken,omitempty" jsonschema:"when the lease has a checkpoint (recorded progress, inherited by the next holder): the fencing token of the holding that wrote it"`
	ReservedFor      string         `json:"reservedFor,omitempty" jsonschema:"when the free lease is reserved for a few seconds: the holder it is reserved for (a transfer's successor or the best waiting candidate); anyone else's acquire is refused meanwhile"`
	ReservedUntil    string         `json:"reservedUntil,omitempty" jsonschema:"the lease service's time (RFC 3339) at which the reservation lapses, at the latest"`
	YieldRequested   bool           `json:"yieldRequested,omitempty" jsonschema:"true when a waiting candidate of higher priority asks the holder to step down"`
	YieldTo          string         `json:"yieldTo,omitempty" jsonschema:"the candidate that asks the holder to step down"`
	Candidates       int            `json:"candidates,omitempty" jsonschema:"how many candidates (acquires with a priority) wait for the lease"`
}

func leaseView(l client.Lease, mine bool) LeaseView {
	v := LeaseView{
		Name: l.Name, Holder: l.Holder, Held: l.Held, FencingToken: l.FencingToken, TTLSeconds: l.TTL.Seconds(),
		ExpireTime: stamp(l.ExpireTime), RemainingSeconds: l.Remaining.Seconds(), Transitions: l.Transitions, HeldByMe: mine,
		Priority: l.Priority, CheckpointToken: l.CheckpointToken, ReservedFor: l.ReservedFor,
		YieldRequested: l.YieldRequested, YieldTo: l.YieldTo, Candidates: l.Candidates,
	}
	if l.ReservedFor != "" {
		v.ReservedUntil = stamp(l.ReservedUntil)
	}
	if len(l.Metadata) > 0 {
		var md map[string]any
		if json.Unmarshal(l.Metadata, &md) == nil && len(md) > 0 {
			v.Metadata = md
		}
	}
	return v
}

func heldView(h *holding, window time.Duration) HeldLease {
	return HeldLease{
		Name: h.name, FencingToken: h.token, Proof: h.proof, Holder: h.lease.Holder, WindowSeconds: window.Seconds(),
		TTLSeconds:  h.kh.TTL().Seconds(),
		AcquireTime: stamp(h.lease.AcquireTime), Renewing: true, Priority: h.lease.Priority, YieldTo: h.yieldTo,
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// AcquireInput is the input of lease_acquire.
type AcquireInput struct {
	Name        string         `json:"name" jsonschema:"the lease, such as team-a.scheduler"`
	TTLSeconds  float64        `json:"ttlSeconds,omitempty" jsonschema:"only with plain renewals (see the instructions): how long the lease outlives a crashed server, 1–3600 s"`
	WaitSeconds float64        `json:"waitSeconds,omitempty" jsonschema:"wait up to this many seconds (0–60) for another's holding to end; default 0"`
	Metadata    map[string]any `json:"metadata,omitempty" jsonschema:"a small JSON object everyone can read (what you do, where to reach you)"`
	Priority    *int           `json:"priority,omitempty" jsonschema:"0–1000, higher first; with waitSeconds you wait as a candidate"`
	Preempt     bool           `json:"preempt,omitempty" jsonschema:"with waitSeconds and a higher priority: ask the holder to step down (never forced)"`
}

// AcquireOutput is the result of lease_acquire.
type AcquireOutput struct {
	Acquired          bool    `json:"acquired" jsonschema:"true when this session holds the lease now"`
	Name              string  `json:"name" jsonschema:"the lease name"`
	FencingToken      int64   `json:"fencingToken,omitempty" jsonschema:"when acquired: the holding's fencing token"`
	Proof             string  `json:"proof,omitempty" jsonschema:"when acquired: the service's signed proof of the holding, to pass to tools that write"`
	WindowSeconds     float64 `json:"windowSeconds,omitempty" jsonschema:"held through a session: freed within this many seconds if this server dies (ttlSeconds does not apply)"`
	Holder            string  `json:"holder" jsonschema:"who holds the lease: this session's holder when acquired, else the other holder; empty when nobody holds it but it is reserved for another (reservedFor)"`
	ExpireTime        string  `json:"expireTime" jsonschema:"the lease service's time (RFC 3339) at which the holding ends unless renewed; the leasectl process renews yours in the background"`
	AlreadyHeld       bool    `json:"alreadyHeld,omitempty" jsonschema:"true when this session held it already (same token)"`
	Priority          int     `json:"priority,omitempty" jsonschema:"when acquired: the priority recorded on your holding"`
	ReservedFor       string  `json:"reservedFor,omitempty" jsonschema:"when not acquired because the free lease is reserved for a few seconds: the holder it is reserved for (a transfer's successor, or the waiting candidate of highest priority)"`
	ReservedUntil     string  `json:"reservedUntil,omitempty" jsonschema:"the lease service's time (RFC 3339) at which the reservation lapses, at the latest"`
	RetryAfterSeconds float64 `json:"retryAfterSeconds,omitempty" jsonschema:"when not acquired: seconds until the other holding expires unless renewed, or until the reservation lapses"`
	// Checkpoint is the checkpoint the new holding inherits, if the lease
	// has one.
	Checkpoint      map[string]any `json:"checkpoint,omitempty" jsonschema:"when acquired: the last progress a previous holder recorded (lease_checkpoint or a release with a checkpoint); resume from it instead of starting over"`
	CheckpointToken int64          `json:"checkpointToken,omitempty" jsonschema:"the fencing token of the holding that wrote checkpoint"`
	Instructions    string         `json:"instructions" jsonschema:"what to do now"`
	Status
}

// ReleaseInput is the input of lease_release.
type ReleaseInput struct {
	Name string `json:"name" jsonschema:"a lease you hold"`
	Done bool   `json:"done,omitempty" jsonschema:"true for a task you finished: never handed out again; false gives it back"`
	// Checkpoint, if not nil, is written before the holding ends.
	Checkpoint map[string]any `json:"checkpoint,omitempty" jsonschema:"your last progress (JSON object, at most 16 KiB) for the next holder"`
}

// ReleaseOutput is the result of lease_release.
type ReleaseOutput struct {
	Released     bool   `json:"released" jsonschema:"true: the holding has ended and its fencing token is no longer valid"`
	Name         string `json:"name" jsonschema:"the lease name"`
	FencingToken int64  `json:"fencingToken" jsonschema:"the token of the holding that ended"`
	MarkedDone   bool   `json:"markedDone,omitempty" jsonschema:"true when the task was marked done"`
	// CheckpointWritten says the release's checkpoint was stored.
	CheckpointWritten bool `json:"checkpointWritten,omitempty" jsonschema:"true when the checkpoint was stored for the next holder"`
	Status
}

// CheckpointInput is the input of lease_checkpoint.
type CheckpointInput struct {
	Name       string         `json:"name" jsonschema:"a lease you hold"`
	Checkpoint map[string]any `json:"checkpoint" jsonschema:"your progress (JSON object, at most 16 KiB), such as {\"step\":3}; replaces the previous one"`
}

// CheckpointOutput is the result of lease_checkpoint.
type CheckpointOutput struct {
	Written         bool   `json:"written" jsonschema:"true: the service stored the checkpoint; the next holder of the lease receives it, even if this session crashes"`
	Name            string `json:"name" jsonschema:"the lease name"`
	FencingToken    int64  `json:"fencingToken" jsonschema:"the token of your holding, still valid"`
	CheckpointToken int64  `json:"checkpointToken" jsonschema:"the fencing token the checkpoint is recorded under (your holding's)"`
	YieldRequested  bool   `json:"yieldRequested,omitempty" jsonschema:"true when a waiting agent of higher priority asks for the lease: call lease_release once you stopped"`
	YieldTo         string `json:"yieldTo,omitempty" jsonschema:"the agent that asks for the lease"`
	Instructions    string `json:"instructions" jsonschema:"what to do now"`
	Status
}

// GetInput is the input of lease_get.
type GetInput struct {
	Name string `json:"name" jsonschema:"the lease name"`
}

// GetOutput is the result of lease_get.
type GetOutput struct {
	Exists bool       `json:"exists" jsonschema:"false when the lease has never been acquired"`
	Lease  *LeaseView `json:"lease,omitempty" jsonschema:"the lease, when it exists"`
	Status
}

// ListInput is the input of lease_list.
type ListInput struct {
	Prefix    string `json:"prefix,omitempty" jsonschema:"only names that start with this"`
	PageSize  int    `json:"pageSize,omitempty" jsonschema:"at most this many (default 100)"`
	PageToken string `json:"pageToken,omitempty" jsonschema:"the previous page's nextPageToken"`
}

// ListOutput is the result of lease_list.
type ListOutput struct {
	Leases        []LeaseView `json:"leases" jsonschema:"the leases in name order"`
	NextPageToken string      `json:"nextPageToken,omitempty" jsonschema:"pass it as pageToken for the next page; absent on the last page"`
	Status
}

// ClaimInput is the input of lease_claim_next.
type ClaimInput struct {
	Prefix     string   `json:"prefix" jsonschema:"the task namespace, such as build.task-"`
	Names      []string `json:"names,omitempty" jsonschema:"the tasks (full names under prefix) in the order to try; default: every lease under prefix"`
	TTLSeconds float64  `json:"ttlSeconds,omitempty" jsonschema:"only with plain renewals: as lease_acquire's"`
}

// ClaimOutput is the result of lease_claim_next.
type ClaimOutput struct {
	Claimed      bool   `json:"claimed" jsonschema:"true when a task was claimed; false when no task is free"`
	Name         string `json:"name,omitempty" jsonschema:"the task (lease) claimed"`
	FencingToken int64  `json:"fencingToken,omitempty" jsonschema:"the holding's fencing token"`
	Proof        string `json:"proof,omitempty" jsonschema:"the service's signed proof of the holding, to pass to tools that write"`
	// WindowSeconds is the session's window when the task is held through
	// a session.
	WindowSeconds float64 `json:"windowSeconds,omitempty" jsonschema:"held through a session: freed within this many seconds if this server dies"`
	ExpireTime    string  `json:"expireTime,omitempty" jsonschema:"the lease service's time (RFC 3339) at which the holding ends unless renewed; renewed in the background"`
	Done          int     `json:"done" jsonschema:"how many candidate tasks are done"`
	HeldByOthers  int     `json:"heldByOthers" jsonschema:"how many candidate tasks other holders hold now, or are reserved for for a few seconds"`
	// HeldByYou counts the candidate tasks this session holds already.
	HeldByYou    int    `json:"heldByYou" jsonschema:"how many candidate tasks this session holds already: finish them"`
	Instructions string `json:"instructions" jsonschema:"what to do now"`
	Status
}

// HeldInput is the input of lease_held.
type HeldInput struct{}

// HeldOutput is the result of lease_held.
type HeldOutput struct {
	Holder string      `json:"holder" jsonschema:"the holder identity of this session"`
	Leases []HeldLease `json:"leases" jsonschema:"every lease this session holds now"`
	Status
}
