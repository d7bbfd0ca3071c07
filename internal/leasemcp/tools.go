package leasemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
)

// namePattern is the rule of docs/contract.md §1 for lease names.
const namePattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

// maxCandidates bounds lease_claim_next's names.
const maxCandidates = 1000

// addTools registers the tools.
func (s *Server) addTools() {
	addTool(s, &mcp.Tool{
		Name:  "lease_acquire",
		Title: "Acquire a lease",
		Description: "Become the single holder of a lease (the right to act as leader or worker for what it names). " +
			"Gives a fencingToken and a proof; renewed in the background until lease_release or the session ends: never renew. " +
			"acquired=false when another holds it (holder) or it is reserved for another (reservedFor); pass waitSeconds to wait, " +
			"with a priority to wait as a candidate. Resume from checkpoint when the result has one. Acquiring a lease you hold " +
			"returns the same token.",
		InputSchema: schema[AcquireInput](func(p map[string]*jsonschema.Schema) {
			p["name"].Pattern = namePattern
			p["ttlSeconds"].Minimum, p["ttlSeconds"].Maximum = ptr(minTTL.Seconds()), ptr(maxTTL.Seconds())
			p["waitSeconds"].Minimum, p["waitSeconds"].Maximum = ptr(0.0), ptr(60.0)
			// An integer, or absent: no priority (a *int only to tell 0 from none).
			p["priority"].Type, p["priority"].Types = "integer", nil
			p["priority"].Minimum, p["priority"].Maximum = ptr(0.0), ptr(float64(client.MaxPriority))
		}),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.acquireTool)
	addTool(s, &mcp.Tool{
		Name:  "lease_release",
		Title: "Release a lease",
		Description: "End your holding of a lease; its token and proof stop being valid. For a task of lease_claim_next pass " +
			"done=true once it is finished (never claimed again), false to give it back. Stop acting as holder first.",
		InputSchema: schema[ReleaseInput](func(p map[string]*jsonschema.Schema) { p["name"].Pattern = namePattern }),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, s.releaseTool)
	addTool(s, &mcp.Tool{
		Name:  "lease_checkpoint",
		Title: "Record progress on a lease",
		Description: "Store your progress on a lease you hold (JSON object, at most 16 KiB); the next holder gets it in " +
			"lease_acquire's checkpoint, even if you crash. Call it after each durable step, and before releasing on a yield request.",
		InputSchema: schema[CheckpointInput](func(p map[string]*jsonschema.Schema) { p["name"].Pattern = namePattern }),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, s.checkpointTool)
	addTool(s, &mcp.Tool{
		Name:        "lease_get",
		Title:       "Look at a lease",
		Description: "Who holds a lease, with which fencing token, until when (the service's time); heldByMe says if you do. Read-only.",
		InputSchema: schema[GetInput](func(p map[string]*jsonschema.Schema) { p["name"].Pattern = namePattern }),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.getTool)
	addTool(s, &mcp.Tool{
		Name:        "lease_list",
		Title:       "List leases",
		Description: "Leases under a prefix in name order, a page at a time (pass nextPageToken as pageToken). Read-only.",
		InputSchema: schema[ListInput](func(p map[string]*jsonschema.Schema) {
			p["pageSize"].Minimum, p["pageSize"].Maximum = ptr(0.0), ptr(1000.0)
		}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.listTool)
	addTool(s, &mcp.Tool{
		Name:  "lease_claim_next",
		Title: "Claim the next free task",
		Description: "Claim the first task under prefix (the names given, else every lease under it) that nobody holds and " +
			"that is not done; each task goes to one agent at a time. claimed=false: done, heldByOthers and heldByYou say why. " +
			"Release a finished task with done=true. Names ending in .done are markers, not tasks.",
		InputSchema: schema[ClaimInput](func(p map[string]*jsonschema.Schema) {
			p["prefix"].Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
			p["names"].Items.Pattern = namePattern
			p["names"].MaxItems = ptr(maxCandidates)
			p["ttlSeconds"].Minimum, p["ttlSeconds"].Maximum = ptr(minTTL.Seconds()), ptr(maxTTL.Seconds())
		}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.claimTool)
	addTool(s, &mcp.Tool{
		Name:        "lease_held",
		Title:       "What this session holds",
		Description: "The leases you hold, with tokens and proofs, and losses since the last result; answered locally. Read-only.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: ptr(false), OpenWorldHint: ptr(false)},
	}, s.heldTool)
}

// schema infers the input schema of T and lets edit adjust its
// properties.
func schema[T any](edit func(map[string]*jsonschema.Schema)) *jsonschema.Schema {
	sc, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("leasemcp: schema of %T: %v", *new(T), err)) // a programming error, found by every test
	}
	edit(sc.Properties)
	return sc
}

func ptr[T any](v T) *T { return &v }

// status sweeps the holdings and returns the session's status; drain
// reports the pending losses (once).
func (s *Server) status(drain bool) Status {
	s.sweep()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Held: []HeldToken{}}
	for _, h := range s.held {
		st.Held = append(st.Held, HeldToken{Name: h.name, FencingToken: h.token, Proof: h.proof})
	}
	slices.SortFunc(st.Held, func(a, b HeldToken) int { return strings.Compare(a.Name, b.Name) })
	for _, t := range st.Held {
		if h := s.held[t.Name]; h.yieldTo != "" {
			st.YieldRequests = append(st.YieldRequests, YieldRequest{Name: h.name, FencingToken: h.token, YieldTo: h.yieldTo})
		}
	}
	st.LostLeases = slices.Clone(s.lost)
	if drain {
		s.lost = nil
	}
	var warn []string
	if len(st.LostLeases) > 0 {
		names := make([]string, len(st.LostLeases))
		for i, l := range st.LostLeases {
			names[i] = fmt.Sprintf("%s (token %d)", l.Name, l.FencingToken)
		}
		warn = append(warn, "LOST: "+strings.Join(names, ", ")+". Stop acting as the holder of these leases now and do not use their tokens again.")
	}
	for _, y := range st.YieldRequests {
		warn = append(warn, yieldMessage(y))
	}
	st.Warning = strings.Join(warn, " ")
	return st
}

// yieldMessage tells the agent what a yield request asks of it.
func yieldMessage(y YieldRequest) string {
	return fmt.Sprintf("YIELD REQUESTED: %q, waiting with a higher priority, asks for %s, which you hold with fencing token %d. "+
		"Reach a safe point, record your progress with lease_checkpoint (or pass checkpoint to lease_release), then call "+
		"lease_release so that it takes over. You remain the holder until you release it.", y.YieldTo, y.Name, y.FencingToken)
}

// fail returns err for a tool result, with the pending losses (which it
// reports) and the yield requests.
func (s *Server) fail(err error) error {
	if st := s.status(true); st.Warning != "" {
		return fmt.Errorf("%w\n%s", err, st.Warning)
	}
	return err
}

// seconds turns a tool's seconds into a duration of whole milliseconds;
// zero gives def.
func seconds(v float64, def time.Duration, field string, lo, hi time.Duration) (time.Duration, error) {
	if v == 0 {
		return def, nil
	}
	d := time.Duration(math.Round(v*1000)) * time.Millisecond
	if math.IsNaN(v) || d < lo || d > hi {
		return 0, fmt.Errorf("%s must be a number between %s and %s; you gave %s", field, num(lo.Seconds()), num(hi.Seconds()), num(v))
	}
	return d, nil
}

// checkName refuses a name that breaks docs/contract.md §1.
func checkName(name string) error {
	if !client.ValidName(name) {
		return fmt.Errorf("lease name %q is invalid: use 1–128 characters of letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// begin checks name and marks it busy for the call.
func (s *Server) begin(name string) (func(), error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	done, ok := s.claim(name)
	if !ok {
		return nil, fmt.Errorf("another call on lease %q is in progress in this session; wait for it to finish", name)
	}
	return done, nil
}

// get returns the session's holding of name, if alive.
func (s *Server) get(name string) *holding {
	s.sweep()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[name]
}

func holdingInstructions(name string, token int64) string {
	return fmt.Sprintf("You hold %s with fencing token %d. Pass its proof (never the bare number) to every tool that writes "+
		"as its holder. It is renewed in the background: do not renew it. Call lease_release when you are done. If a later "+
		"result lists %s under lostLeases, stop at once.", name, token, name)
}

func (s *Server) acquireTool(ctx context.Context, _ *mcp.CallToolRequest, in AcquireInput) (*mcp.CallToolResult, AcquireOutput, error) {
	ttl, err := seconds(in.TTLSeconds, s.cfg.TTL, "ttlSeconds", minTTL, maxTTL)
	if err != nil {
		return nil, AcquireOutput{}, s.fail(err)
	}
	wait, err := seconds(in.WaitSeconds, 0, "waitSeconds", 0, time.Minute)
	if err != nil {
		return nil, AcquireOutput{}, s.fail(err)
	}
	req := client.AcquireRequest{Holder: s.cfg.Holder, TTL: ttl, Wait: wait, Preempt: in.Preempt}
	if in.Priority != nil {
		if *in.Priority < 0 || *in.Priority > client.MaxPriority {
			return nil, AcquireOutput{}, s.fail(fmt.Errorf("priority must be a whole number between 0 and %d; you gave %d", client.MaxPriority, *in.Priority))
		}
		req.Priority, req.Candidate = *in.Priority, true
	}
	if in.Preempt && wait == 0 {
		return nil, AcquireOutput{}, s.fail(errors.New("preempt needs waitSeconds > 0: a holder is asked to step down only while you wait for it"))
	}
	var md json.RawMessage
	if in.Metadata != nil {
		if md, err = json.Marshal(in.Metadata); err != nil {
			return nil, AcquireOutput{}, s.fail(fmt.Errorf("metadata: %w", err))
		}
	}
	done, err := s.begin(in.Name)
	if err != nil {
		return nil, AcquireOutput{}, s.fail(err)
	}
	defer done()
	if h := s.get(in.Name); h != nil {
		return nil, AcquireOutput{
			Acquired: true, AlreadyHeld: true, Name: h.name, FencingToken: h.token, Proof: h.proof, WindowSeconds: s.windowSeconds(),
			Holder: s.cfg.Holder, ExpireTime: stamp(h.lease.ExpireTime), Instructions: holdingInstructions(h.name, h.token) + s.ttlNote(in.TTLSeconds),
			Status: s.status(true),
		}, nil
	}
	req.Metadata = md
	l, err := s.acquire(ctx, in.Name, req)
	var held *client.HeldError
	var reserved *client.ReservedError
	switch {
	case errors.As(err, &reserved):
		return nil, AcquireOutput{
			Name: in.Name, ExpireTime: stamp(reserved.Lease.ExpireTime), ReservedFor: reserved.ReservedFor,
			ReservedUntil: stamp(reserved.ReservedUntil), RetryAfterSeconds: reserved.RetryAfter.Seconds(),
			Instructions: fmt.Sprintf("%s is free but reserved for %q until %s (the successor a holder handed it to, or the "+
				"waiting candidate of highest priority): do not act on it. Try again in %.0f seconds, pass waitSeconds (with a "+
				"priority to wait as a candidate), or pick other work.", in.Name, reserved.ReservedFor,
				stamp(reserved.ReservedUntil), math.Ceil(reserved.RetryAfter.Seconds())),
			Status: s.status(true),
		}, nil
	case errors.As(err, &held):
		return nil, AcquireOutput{
			Name: in.Name, Holder: held.Lease.Holder, ExpireTime: stamp(held.Lease.ExpireTime),
			RetryAfterSeconds: held.Lease.Remaining.Seconds(),
			Instructions: fmt.Sprintf("%s is held by %q (fencing token %d): do not act on it. Try again later, pass waitSeconds "+
				"to wait for it, or pick other work.", in.Name, held.Lease.Holder, held.Lease.FencingToken),
			Status: s.status(true),
		}, nil
	case err != nil:
		return nil, AcquireOutput{}, s.fail(err)
	}
	out := AcquireOutput{
		Acquired: true, Name: l.Name, FencingToken: l.FencingToken, Proof: proofOf(l), WindowSeconds: s.windowSeconds(),
		Holder: l.Holder, ExpireTime: stamp(l.ExpireTime), Priority: l.Priority,
		Instructions: holdingInstructions(l.Name, l.FencingToken) + s.ttlNote(in.TTLSeconds),
	}
	if len(l.Checkpoint) > 0 {
		if err := json.Unmarshal(l.Checkpoint, &out.Checkpoint); err != nil {
			s.cfg.Logger.Warn("leasectl mcp: the inherited checkpoint is no JSON object", "lease", l.Name, "err", err)
		} else {
			out.CheckpointToken = l.CheckpointToken
			out.Instructions += fmt.Sprintf(" checkpoint is the last progress recorded by a previous holder (the holding with "+
				"fencing token %d): resume from it rather than starting over, and record your own with lease_checkpoint.", l.CheckpointToken)
		}
	}
	out.Status = s.status(true)
	return nil, out, nil
}

// acquire holds name for the session with the Keeper (one acquire; the
// Keeper keeps the holding until it is released, lost or the Keeper
// closes). A lost holding of name is released first, so the agent always
// gets a new token.
func (s *Server) acquire(ctx context.Context, name string, req client.AcquireRequest) (client.Lease, error) {
	if err := s.forgetStale(ctx, name); err != nil {
		return client.Lease{}, err
	}
	kh, err := s.cfg.Keeper.Hold(ctx, name, req)
	if err != nil {
		return client.Lease{}, err
	}
	// An acquire that waited or was slow: a deadline not mostly spent
	// already (a renew sent now, or the session's next heartbeat).
	if !kh.Fresh(ctx, 0) {
		return client.Lease{}, fmt.Errorf("the holding of %q ended before it could be confirmed: %w", name, errors.Join(kh.Err(), ctx.Err()))
	}
	l := kh.Lease()
	if _, ok := s.adopt(kh, req.TTL); !ok {
		return client.Lease{}, errors.New("the session is ending: the lease was released")
	}
	return l, nil
}

func (s *Server) releaseTool(ctx context.Context, _ *mcp.CallToolRequest, in ReleaseInput) (*mcp.CallToolResult, ReleaseOutput, error) {
	done, err := s.begin(in.Name)
	if err != nil {
		return nil, ReleaseOutput{}, s.fail(err)
	}
	defer done()
	h := s.get(in.Name)
	if h == nil {
		return nil, ReleaseOutput{}, s.fail(fmt.Errorf("this session does not hold %q (never acquired, released, or lost)", in.Name))
	}
	if in.Checkpoint != nil {
		// Written while the holding lasts, before anything can end it: a
		// candidate waiting for the lease may take it the moment it is
		// released.
		if _, err := s.writeCheckpoint(ctx, h, in.Checkpoint); err != nil {
			return nil, ReleaseOutput{}, s.fail(fmt.Errorf("%q is not released: %w", in.Name, err))
		}
	}
	if in.Done {
		if err := s.markDone(ctx, h); err != nil {
			return nil, ReleaseOutput{}, s.fail(fmt.Errorf("%q is still held and not marked done: %w", in.Name, err))
		}
	}
	s.mu.Lock()
	still := s.held[in.Name] == h
	delete(s.held, in.Name)
	s.mu.Unlock()
	if !still {
		return nil, ReleaseOutput{}, s.fail(fmt.Errorf("the holding of %q was lost meanwhile", in.Name))
	}
	if err := s.release(h); err != nil {
		return nil, ReleaseOutput{}, s.fail(fmt.Errorf("%w; the lease runs out at its TTL", err))
	}
	return nil, ReleaseOutput{Released: true, Name: h.name, FencingToken: h.token, MarkedDone: in.Done,
		CheckpointWritten: in.Checkpoint != nil, Status: s.status(true)}, nil
}

func (s *Server) checkpointTool(ctx context.Context, _ *mcp.CallToolRequest, in CheckpointInput) (*mcp.CallToolResult, CheckpointOutput, error) {
	if in.Checkpoint == nil {
		return nil, CheckpointOutput{}, s.fail(errors.New("checkpoint is required: give your progress as a JSON object"))
	}
	done, err := s.begin(in.Name)
	if err != nil {
		return nil, CheckpointOutput{}, s.fail(err)
	}
	defer done()
	h := s.get(in.Name)
	if h == nil {
		return nil, CheckpointOutput{}, s.fail(fmt.Errorf("this session does not hold %q (never acquired, released, or lost): only the holder records a checkpoint", in.Name))
	}
	l, err := s.writeCheckpoint(ctx, h, in.Checkpoint)
	if err != nil {
		return nil, CheckpointOutput{}, s.fail(err)
	}
	out := CheckpointOutput{
		Written: true, Name: h.name, FencingToken: h.token, CheckpointToken: l.CheckpointToken,
		YieldRequested: l.YieldRequested, YieldTo: l.YieldTo,
		Instructions: fmt.Sprintf("The checkpoint of %s is stored: the next holder receives it with its lease_acquire. You "+
			"still hold %s with fencing token %d; it is renewed in the background.", h.name, h.name, h.token),
	}
	if l.YieldRequested {
		out.Instructions += fmt.Sprintf(" %q asks for the lease: once you have stopped, call lease_release.", l.YieldTo)
	}
	out.Status = s.status(true)
	return nil, out, nil
}

// writeCheckpoint stores cp as the checkpoint of the holding h with a renew
// of it (docs/contract.md §8) and notes the yield request the answer
// carries. A renew answered lease_lost loses the holding.
func (s *Server) writeCheckpoint(ctx context.Context, h *holding, cp map[string]any) (client.Lease, error) {
	raw, err := json.Marshal(cp)
	if err != nil {
		return client.Lease{}, fmt.Errorf("checkpoint: %w", err)
	}
	if len(raw) > client.MaxCheckpointBytes {
		return client.Lease{}, fmt.Errorf("checkpoint is %d bytes as JSON, more than %d: record less (where you are, not what you did)",
			len(raw), client.MaxCheckpointBytes)
	}
	l, err := h.kh.Renew(ctx, client.RenewRequest{Holder: s.cfg.Holder, FencingToken: h.token, Checkpoint: raw})
	if errors.Is(err, client.ErrLost) {
		s.lose(h, "the service answered lease_lost to the renew that carried a checkpoint (the holding expired, was "+
			"revoked or was taken over): "+err.Error())
		return client.Lease{}, fmt.Errorf("checkpoint not written: the holding of %q (fencing token %d) is lost: %w", h.name, h.token, err)
	}
	if err != nil {
		return client.Lease{}, fmt.Errorf("checkpoint of %q not written (you still hold it; try again): %w", h.name, err)
	}
	s.noteYield(h, yieldOf(l))
	return l, nil
}

// yieldOf is the candidate a lease's answer says asks the holder to step
// down, "" when none.
func yieldOf(l client.Lease) string {
	if !l.YieldRequested {
		return ""
	}
	return l.YieldTo
}

func (s *Server) getTool(ctx context.Context, _ *mcp.CallToolRequest, in GetInput) (*mcp.CallToolResult, GetOutput, error) {
	if err := checkName(in.Name); err != nil {
		return nil, GetOutput{}, s.fail(err)
	}
	l, err := s.c.Get(ctx, in.Name)
	if errors.Is(err, client.ErrNotFound) {
		return nil, GetOutput{Status: s.status(true)}, nil
	}
	if err != nil {
		return nil, GetOutput{}, s.fail(err)
	}
	mine := s.mine(l)
	if mine {
		s.mu.Lock()
		h := s.held[l.Name]
		s.mu.Unlock()
		if h != nil {
			s.noteYield(h, yieldOf(l))
		}
	}
	v := leaseView(l, mine)
	return nil, GetOutput{Exists: true, Lease: &v, Status: s.status(true)}, nil
}

// mine reports whether l is the session's live holding.
func (s *Server) mine(l client.Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[l.Name]
	return h != nil && h.token == l.FencingToken && l.Held
}

func (s *Server) listTool(ctx context.Context, _ *mcp.CallToolRequest, in ListInput) (*mcp.CallToolResult, ListOutput, error) {
	if in.PageSize < 0 || in.PageSize > 1000 {
		return nil, ListOutput{}, s.fail(fmt.Errorf("pageSize %d is out of range: give 1 … 1000, or 0 for the default", in.PageSize))
	}
	p, err := s.c.List(ctx, client.ListRequest{Prefix: in.Prefix, PageSize: in.PageSize, PageToken: in.PageToken})
	if err != nil {
		return nil, ListOutput{}, s.fail(err)
	}
	out := ListOutput{Leases: make([]LeaseView, 0, len(p.Leases)), NextPageToken: p.NextPageToken}
	for _, l := range p.Leases {
		out.Leases = append(out.Leases, leaseView(l, s.mine(l)))
	}
	out.Status = s.status(true)
	return nil, out, nil
}

func (s *Server) heldTool(context.Context, *mcp.CallToolRequest, HeldInput) (*mcp.CallToolResult, HeldOutput, error) {
	st := s.status(true)
	out := HeldOutput{Holder: s.cfg.Holder, Leases: []HeldLease{}, Status: st}
	s.mu.Lock()
	for _, t := range st.Held {
		if h := s.held[t.Name]; h != nil {
			out.Leases = append(out.Leases, heldView(h, s.window()))
		}
	}
	s.mu.Unlock()
	return nil, out, nil
}
