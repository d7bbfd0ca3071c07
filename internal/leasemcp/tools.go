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
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "lease_acquire",
		Title: "Acquire a lease",
		Description: "Become the holder of a lease, the single right to act as leader or worker for the thing it names. " +
			"On success you get a fencingToken: pass it with every write you make as the holder, so that systems can " +
			"refuse a stale holder. The server renews the lease in the background until you call lease_release or the " +
			"session ends; never try to renew it yourself. If another holder has it, acquired is false and holder names " +
			"them (retry later, or pass waitSeconds to wait for it). Acquiring a lease you already hold returns the same token.",
		InputSchema: schema[AcquireInput](func(p map[string]*jsonschema.Schema) {
			p["name"].Pattern = namePattern
			p["ttlSeconds"].Minimum, p["ttlSeconds"].Maximum = ptr(0.001), ptr(3600.0)
			p["waitSeconds"].Minimum, p["waitSeconds"].Maximum = ptr(0.0), ptr(60.0)
		}),
	}, s.acquireTool)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "lease_release",
		Title: "Release a lease",
		Description: "Give up a lease this session holds: its fencing token stops being valid and the next holder gets a " +
			"higher one. For a task from lease_claim_next, pass done=true once the work is finished so that nobody claims " +
			"it again; done=false hands the unfinished task back. Stop acting as the holder before you call it.",
		InputSchema: schema[ReleaseInput](func(p map[string]*jsonschema.Schema) { p["name"].Pattern = namePattern }),
	}, s.releaseTool)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "lease_get",
		Title: "Look at a lease",
		Description: "Who holds a lease, with which fencing token, until when (server time), and its metadata. heldByMe " +
			"says whether this session holds it. Read-only.",
		InputSchema: schema[GetInput](func(p map[string]*jsonschema.Schema) { p["name"].Pattern = namePattern }),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.getTool)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "lease_list",
		Title: "List leases",
		Description: "Leases whose name starts with prefix, in name order, held or not, a page at a time (pass " +
			"nextPageToken back as pageToken). Read-only.",
		InputSchema: schema[ListInput](func(p map[string]*jsonschema.Schema) {
			p["pageSize"].Minimum, p["pageSize"].Maximum = ptr(0.0), ptr(1000.0)
		}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.listTool)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "lease_claim_next",
		Title: "Claim the next free task",
		Description: "Claim one task of a shared task list, so that among all agents each task is worked on by one at a " +
			"time and a finished task is never claimed again. Tasks are leases whose names start with prefix: the names " +
			"you pass, or else every lease that exists under prefix. It acquires the first task in order that nobody " +
			"holds and that is not done, and returns it with its fencingToken; claimed=false means no task is free now " +
			"(done and heldByOthers say why). When the task is finished call lease_release with done=true; names " +
			"ending in .done are the done markers and are never tasks.",
		InputSchema: schema[ClaimInput](func(p map[string]*jsonschema.Schema) {
			p["prefix"].Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`
			p["names"].Items.Pattern = namePattern
			p["names"].MaxItems = ptr(maxCandidates)
			p["ttlSeconds"].Minimum, p["ttlSeconds"].Maximum = ptr(0.001), ptr(3600.0)
		}),
	}, s.claimTool)
	mcp.AddTool(s.srv, &mcp.Tool{
		Name:  "lease_held",
		Title: "What this session holds",
		Description: "Every lease this session holds now, with its fencing token, and any holding lost since the last " +
			"result. Answers from the server's own state, even when the lease service cannot be reached. Read-only.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
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
		st.Held = append(st.Held, HeldToken{Name: h.name, FencingToken: h.token})
	}
	slices.SortFunc(st.Held, func(a, b HeldToken) int { return strings.Compare(a.Name, b.Name) })
	st.LostLeases = slices.Clone(s.lost)
	if drain {
		s.lost = nil
	}
	if len(st.LostLeases) > 0 {
		names := make([]string, len(st.LostLeases))
		for i, l := range st.LostLeases {
			names[i] = fmt.Sprintf("%s (token %d)", l.Name, l.FencingToken)
		}
		st.Warning = "LOST: " + strings.Join(names, ", ") + ". Stop acting as the holder of these leases now and do not use their tokens again."
	}
	return st
}

// fail returns err for a tool result, with the pending losses, which it
// reports.
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
		return 0, fmt.Errorf("%s %v is out of range: give %v … %v seconds", field, v, lo.Seconds(), hi.Seconds())
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
	return fmt.Sprintf("You hold %s with fencing token %d. Pass fencingToken %d with every write you make as its holder. "+
		"It is renewed in the background: do not renew it. Call lease_release when you are done. If a later result lists "+
		"%s under lostLeases, stop at once.", name, token, token, name)
}

func (s *Server) acquireTool(ctx context.Context, _ *mcp.CallToolRequest, in AcquireInput) (*mcp.CallToolResult, AcquireOutput, error) {
	ttl, err := seconds(in.TTLSeconds, s.cfg.TTL, "ttlSeconds", time.Millisecond, time.Hour)
	if err != nil {
		return nil, AcquireOutput{}, s.fail(err)
	}
	wait, err := seconds(in.WaitSeconds, 0, "waitSeconds", 0, time.Minute)
	if err != nil {
		return nil, AcquireOutput{}, s.fail(err)
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
			Acquired: true, AlreadyHeld: true, Name: h.name, FencingToken: h.token, Holder: s.cfg.Holder,
			ExpireTime: stamp(h.lease.ExpireTime), Instructions: holdingInstructions(h.name, h.token), Status: s.status(true),
		}, nil
	}
	l, err := s.acquire(ctx, in.Name, client.AcquireRequest{Holder: s.cfg.Holder, TTL: ttl, Wait: wait, Metadata: md})
	var held *client.HeldError
	if errors.As(err, &held) {
		return nil, AcquireOutput{
			Name: in.Name, Holder: held.Lease.Holder, ExpireTime: stamp(held.Lease.ExpireTime),
			RetryAfterSeconds: held.Lease.Remaining.Seconds(),
			Instructions: fmt.Sprintf("%s is held by %q (fencing token %d): do not act on it. Try again later, pass waitSeconds "+
				"to wait for it, or pick other work.", in.Name, held.Lease.Holder, held.Lease.FencingToken),
			Status: s.status(true),
		}, nil
	}
	if err != nil {
		return nil, AcquireOutput{}, s.fail(err)
	}
	return nil, AcquireOutput{
		Acquired: true, Name: l.Name, FencingToken: l.FencingToken, Holder: l.Holder, ExpireTime: stamp(l.ExpireTime),
		Instructions: holdingInstructions(l.Name, l.FencingToken), Status: s.status(true),
	}, nil
}

// acquire acquires name for the session and starts renewing it. A lost
// holding of name is released first, so the agent always gets a new token.
func (s *Server) acquire(ctx context.Context, name string, req client.AcquireRequest) (client.Lease, error) {
	if err := s.forgetStale(ctx, name); err != nil {
		return client.Lease{}, err
	}
	sent := time.Now()
	l, err := s.c.Acquire(ctx, name, req)
	if err != nil {
		return client.Lease{}, err
	}
	if time.Since(sent) > req.TTL/6 {
		// The acquire waited or was slow: a renew sent now gives a safe
		// deadline that is not mostly spent already.
		now := time.Now()
		if r, err := s.c.Renew(ctx, name, client.RenewRequest{Holder: s.cfg.Holder, FencingToken: l.FencingToken}); err == nil {
			l, sent = r, now
		}
	}
	if _, ok := s.adopt(l, req.TTL, sent); !ok {
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
	return nil, ReleaseOutput{Released: true, Name: h.name, FencingToken: h.token, MarkedDone: in.Done, Status: s.status(true)}, nil
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
	v := leaseView(l, s.mine(l))
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
			out.Leases = append(out.Leases, heldView(h))
		}
	}
	s.mu.Unlock()
	return nil, out, nil
}
