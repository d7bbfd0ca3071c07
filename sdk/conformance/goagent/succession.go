package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The succession case (docs/contract.md §8) speaks raw HTTP: package client
// gains priority, checkpoint, transfer and lease_reserved separately; until
// it does, this agent proves the protocol with the wire itself.

// wireLease is the part of the lease JSON the succession case reports.
type wireLease struct {
	Holder          string         `json:"holder"`
	FencingToken    int64          `json:"fencingToken"`
	Held            bool           `json:"held"`
	Priority        int            `json:"priority"`
	Checkpoint      map[string]any `json:"checkpoint"`
	CheckpointToken int64          `json:"checkpointToken"`
	ReservedFor     string         `json:"reservedFor"`
	ReservedUntil   string         `json:"reservedUntil"`
	YieldRequested  bool           `json:"yieldRequested"`
	YieldTo         string         `json:"yieldTo"`
	Candidates      int            `json:"candidates"`
}

// wireError is a refusal of the service: its problem code and, for
// lease_reserved, whom the lease is reserved for.
type wireError struct {
	Status      int
	Code        string
	ReservedFor string
	Lease       wireLease
}

// Error implements error.
func (e *wireError) Error() string {
	return fmt.Sprintf("leasesvc: %d %s", e.Status, e.Code)
}

// post sends one lease operation and decodes the 200 answer into a lease.
func post(ctx context.Context, name, verb string, body map[string]any) (wireLease, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return wireLease{}, err
	}
	u := strings.TrimRight(os.Getenv("LEASESVC_URL"), "/") + "/v1/leases/" + url.PathEscape(name) + ":" + verb
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return wireLease{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tok := os.Getenv("LEASESVC_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return wireLease{}, fmt.Errorf("%s %s: %w", verb, name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return wireLease{}, fmt.Errorf("%s %s: %w", verb, name, err)
	}
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Code        string    `json:"code"`
			ReservedFor string    `json:"reservedFor"`
			Lease       wireLease `json:"lease"`
		}
		_ = json.Unmarshal(raw, &p)
		return wireLease{}, &wireError{Status: resp.StatusCode, Code: p.Code, ReservedFor: p.ReservedFor, Lease: p.Lease}
	}
	var l wireLease
	if err := json.Unmarshal(raw, &l); err != nil {
		return wireLease{}, fmt.Errorf("%s %s: decode: %w", verb, name, err)
	}
	return l, nil
}

// checkpointN is the "n" member of a checkpoint, 0 without one.
func checkpointN(l wireLease) any {
	if l.Checkpoint == nil {
		return 0
	}
	return l.Checkpoint["n"]
}

// succession runs the succession case of PROTOCOL.md.
func succession(ctx context.Context, e env) error {
	a, b, c := e.holder, e.holder+"-b", e.holder+"-c"
	ttlMs := e.ttl.Milliseconds()
	l, err := post(ctx, e.name, "acquire", map[string]any{"holder": a, "ttlMs": ttlMs, "priority": 7})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "acquire_priority", "token": l.FencingToken, "priority": l.Priority})
	t, err := post(ctx, e.name, "transfer", map[string]any{"holder": a, "fencingToken": l.FencingToken, "to": b,
		"checkpoint": map[string]any{"n": 1}, "reserveMs": 10000})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "transfer", "held": t.Held, "reservedFor": t.ReservedFor})
	if _, err := post(ctx, e.name, "acquire", map[string]any{"holder": c, "ttlMs": ttlMs}); err != nil {
		line := map[string]any{"step": "acquire_reserved", "error": codeOf(err)}
		var we *wireError
		if errors.As(err, &we) {
			line["error"] = we.Code
			if we.Code == "lease_reserved" {
				line["reservedFor"] = we.ReservedFor
			}
		}
		emit(line)
	} else {
		emit(map[string]any{"step": "acquire_reserved", "error": "none"})
		return fmt.Errorf("acquire_reserved: no error")
	}
	s, err := post(ctx, e.name, "acquire", map[string]any{"holder": b, "ttlMs": ttlMs})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "successor", "holder": s.Holder, "token": s.FencingToken, "checkpointN": checkpointN(s), "checkpointToken": s.CheckpointToken})

	y := e.name + "-yield"
	h, err := post(ctx, y, "acquire", map[string]any{"holder": a, "ttlMs": ttlMs, "priority": 1})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "holding", "token": h.FencingToken, "priority": h.Priority})
	deadline := time.Now().Add(10 * time.Second)
	var r wireLease
	for {
		if r, err = post(ctx, y, "renew", map[string]any{"holder": a, "fencingToken": h.FencingToken}); err != nil {
			return err
		}
		if r.YieldRequested || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	emit(map[string]any{"step": "yield_requested", "yieldRequested": r.YieldRequested, "yieldTo": r.YieldTo, "candidates": r.Candidates})
	rel, err := post(ctx, y, "release", map[string]any{"holder": a, "fencingToken": h.FencingToken, "checkpoint": map[string]any{"n": 2}})
	if err != nil {
		return err
	}
	emit(map[string]any{"step": "released", "held": rel.Held, "checkpointN": checkpointN(rel)})
	emit(map[string]any{"step": "done"})
	return nil
}
