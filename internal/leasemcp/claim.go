package leasemcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/leasesvc/leasesvc/client"
)

// doneSuffix names a task's done marker: the lease "{task}.done" exists
// once the task's holder released it with done=true.
const doneSuffix = ".done"

// maxTaskName is the longest task name that leaves room for doneSuffix.
const maxTaskName = 128 - len(doneSuffix)

func (s *Server) claimTool(ctx context.Context, _ *mcp.CallToolRequest, in ClaimInput) (*mcp.CallToolResult, ClaimOutput, error) {
	ttl, err := seconds(in.TTLSeconds, s.cfg.TTL, "ttlSeconds", minTTL, maxTTL)
	if err != nil {
		return nil, ClaimOutput{}, s.fail(err)
	}
	if in.Prefix == "" || !client.ValidName(in.Prefix) {
		return nil, ClaimOutput{}, s.fail(fmt.Errorf("prefix %q is invalid: give the start of the task names, such as 'build.task-'", in.Prefix))
	}
	if len(in.Names) > maxCandidates {
		return nil, ClaimOutput{}, s.fail(fmt.Errorf("names has %d entries, more than %d", len(in.Names), maxCandidates))
	}
	for _, n := range in.Names {
		if err := checkName(n); err != nil {
			return nil, ClaimOutput{}, s.fail(err)
		}
		if !strings.HasPrefix(n, in.Prefix) || strings.HasSuffix(n, doneSuffix) {
			return nil, ClaimOutput{}, s.fail(fmt.Errorf("task %q must start with prefix %q and must not end in %q", n, in.Prefix, doneSuffix))
		}
	}
	// One look at the whole namespace: tasks held by others and done tasks
	// are skipped without a request each.
	known := map[string]client.Lease{}
	done := map[string]bool{}
	for l, err := range s.c.All(ctx, in.Prefix) {
		if err != nil {
			return nil, ClaimOutput{}, s.fail(err)
		}
		if task, ok := strings.CutSuffix(l.Name, doneSuffix); ok {
			done[task] = true
			continue
		}
		known[l.Name] = l
	}
	cands := in.Names
	if len(cands) == 0 {
		cands = make([]string, 0, len(known))
		for n := range known {
			cands = append(cands, n)
		}
		slices.Sort(cands)
	}
	// The counts cover every candidate, as the listing shows them, whether
	// or not a task is claimed: the agent is told how much is done, how
	// much others hold, and what it holds itself.
	out := ClaimOutput{}
	var free []string
	for _, name := range cands {
		l, ok := known[name]
		switch {
		case done[name]:
			out.Done++
		case ok && l.Held && l.Holder == s.cfg.Holder:
			out.HeldByYou++
		case ok && l.Held, ok && l.ReservedFor != "" && l.ReservedFor != s.cfg.Holder:
			out.HeldByOthers++ // held, or reserved for another for a few seconds (docs/contract.md §8)
		case len(name) > maxTaskName:
			// cannot be marked done, so not a task
		default:
			free = append(free, name)
		}
	}
	for _, name := range free {
		res, err := s.tryClaim(ctx, name, ttl)
		switch {
		case err != nil:
			return nil, ClaimOutput{}, s.fail(fmt.Errorf("claim %q: %w", name, err))
		case res == claimDone:
			out.Done++
		case res == claimMine:
			out.HeldByYou++
		case res == claimTaken:
			out.HeldByOthers++
		default:
			h := s.get(name)
			if h == nil {
				return nil, ClaimOutput{}, s.fail(fmt.Errorf("the claim of %q was lost at once", name))
			}
			out.Claimed, out.Name, out.FencingToken, out.ExpireTime = true, name, h.token, stamp(h.lease.ExpireTime)
			out.Proof, out.WindowSeconds = h.proof, s.windowSeconds()
			out.Instructions = holdingInstructions(name, h.token) + " When the task is finished, call lease_release with done=true." +
				s.ttlNote(in.TTLSeconds)
			out.Status = s.status(true)
			return nil, out, nil
		}
	}
	out.Instructions = claimNoneFree(in.Prefix, out)
	out.Status = s.status(true)
	return nil, out, nil
}

// claimNoneFree tells the agent why no task was claimed, and whether the
// work is finished: only when every task is done.
func claimNoneFree(prefix string, out ClaimOutput) string {
	msg := fmt.Sprintf("No task under %q is free now: %d done, %d held by others, %d held by you.", prefix, out.Done, out.HeldByOthers, out.HeldByYou)
	switch {
	case out.HeldByYou > 0:
		msg += " Finish the tasks you hold (lease_held lists them) and release each with done=true; the work is not finished until they are done."
	case out.HeldByOthers > 0:
		msg += " The tasks others hold may come back if their holders give up: try again later."
	default:
		msg += " Every task is done: the work is finished."
	}
	return msg
}

// claimResult is what became of an attempt to claim one task.
type claimResult int

const (
	claimTaken claimResult = iota // another holder has it, or it is reserved for another
	claimMine                     // this session holds it already, or a call of this session is on it
	claimDone                     // its done marker exists (the holding was released again)
	claimed                       // the session holds it now, as a new holding
)

// tryClaim acquires the task name for the session and says what became
// of it.
func (s *Server) tryClaim(ctx context.Context, name string, ttl time.Duration) (claimResult, error) {
	end, ok := s.claim(name)
	if !ok {
		return claimMine, nil // this session is acquiring or releasing it right now
	}
	defer end()
	if s.get(name) != nil {
		return claimMine, nil
	}
	if _, err := s.acquire(ctx, name, client.AcquireRequest{Holder: s.cfg.Holder, TTL: ttl}); err != nil {
		if errors.Is(err, client.ErrHeld) || errors.Is(err, client.ErrReserved) {
			return claimTaken, nil
		}
		return claimTaken, err
	}
	// A holder marks its task done before it releases it, so a marker made
	// before our holding began is visible now.
	_, err := s.c.Get(ctx, name+doneSuffix)
	switch {
	case errors.Is(err, client.ErrNotFound):
		return claimed, nil
	case err != nil:
		s.dropClaim(name)
		return claimTaken, fmt.Errorf("look for its done marker: %w", err)
	}
	s.dropClaim(name)
	return claimDone, nil
}

// dropClaim releases a holding of the session that the agent was never
// told about.
func (s *Server) dropClaim(name string) {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h != nil {
		if err := s.release(h); err != nil {
			s.cfg.Logger.Warn("leasectl mcp: release failed", "lease", name, "err", err)
		}
	}
}

// markDone creates the done marker of the task h holds: the lease
// "{name}.done", acquired and released at once, with who finished it in
// its metadata.
func (s *Server) markDone(ctx context.Context, h *holding) error {
	if len(h.name) > maxTaskName {
		return fmt.Errorf("a task name may have at most %d characters (its marker %q must fit 128)", maxTaskName, h.name+doneSuffix)
	}
	md, err := json.Marshal(map[string]any{"task": h.name, "doneBy": s.cfg.Holder, "fencingToken": h.token})
	if err != nil {
		return fmt.Errorf("marker metadata: %w", err)
	}
	marker := h.name + doneSuffix
	l, err := s.c.Acquire(ctx, marker, client.AcquireRequest{Holder: s.cfg.Holder, TTL: h.ttl, Metadata: md})
	if err != nil {
		return fmt.Errorf("mark done: %w", err)
	}
	if _, err := s.c.Release(ctx, marker, s.cfg.Holder, l.FencingToken); err != nil {
		s.cfg.Logger.Warn("leasectl mcp: release of a done marker failed; it runs out at its TTL", "lease", marker, "err", err)
	}
	return nil
}
