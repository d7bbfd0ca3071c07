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
	out := ClaimOutput{}
	for _, name := range cands {
		if done[name] {
			out.Done++
			continue
		}
		if l, ok := known[name]; ok && l.Held {
			if l.Holder != s.cfg.Holder {
				out.HeldByOthers++
			}
			continue // another's, or already this session's
		}
		if l, ok := known[name]; ok && l.ReservedFor != "" && l.ReservedFor != s.cfg.Holder {
			out.HeldByOthers++ // reserved for another for a few seconds (docs/contract.md §8)
			continue
		}
		if len(name) > maxTaskName {
			continue // cannot be marked done, so not a task
		}
		ok, isDone, err := s.tryClaim(ctx, name, ttl)
		switch {
		case err != nil:
			return nil, ClaimOutput{}, s.fail(fmt.Errorf("claim %q: %w", name, err))
		case isDone:
			out.Done++
		case !ok:
			out.HeldByOthers++
		default:
			h := s.get(name)
			if h == nil {
				return nil, ClaimOutput{}, s.fail(fmt.Errorf("the claim of %q was lost at once", name))
			}
			out.Claimed, out.Name, out.FencingToken, out.ExpireTime = true, name, h.token, stamp(h.lease.ExpireTime)
			out.Instructions = holdingInstructions(name, h.token) + " When the task is finished, call lease_release with done=true."
			out.Done, out.HeldByOthers = 0, 0 // counted for a failed claim only
			out.Status = s.status(true)
			return nil, out, nil
		}
	}
	out.Instructions = fmt.Sprintf("No task under %q is free now: %d done, %d held by others. If some are held by others, "+
		"they may come back if their holders give up; otherwise the work is finished.", in.Prefix, out.Done, out.HeldByOthers)
	out.Status = s.status(true)
	return nil, out, nil
}

// tryClaim acquires the task name for the session. It reports whether it
// did, and whether the task turned out to be done (its holding then
// released again).
func (s *Server) tryClaim(ctx context.Context, name string, ttl time.Duration) (claimed, isDone bool, err error) {
	end, ok := s.claim(name)
	if !ok {
		return false, false, nil // this session is acquiring or releasing it right now
	}
	defer end()
	if s.get(name) != nil {
		return false, false, nil
	}
	if _, err := s.acquire(ctx, name, client.AcquireRequest{Holder: s.cfg.Holder, TTL: ttl}); err != nil {
		if errors.Is(err, client.ErrHeld) || errors.Is(err, client.ErrReserved) {
			return false, false, nil
		}
		return false, false, err
	}
	// A holder marks its task done before it releases it, so a marker made
	// before our holding began is visible now.
	_, err = s.c.Get(ctx, name+doneSuffix)
	switch {
	case errors.Is(err, client.ErrNotFound):
		return true, false, nil
	case err != nil:
		s.dropClaim(name)
		return false, false, fmt.Errorf("look for its done marker: %w", err)
	}
	s.dropClaim(name)
	return false, true, nil
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
