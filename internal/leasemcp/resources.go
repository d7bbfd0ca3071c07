package leasemcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// heldURI is the resource of the session's holding of a lease.
const heldURI = "lease://held/"

// allHeldURI is the resource listing every holding of the session.
const allHeldURI = "lease://held"

// addResources registers the resource of all holdings; each holding adds
// its own (addHeldResource).
func (s *Server) addResources() {
	s.srv.AddResource(&mcp.Resource{
		URI: allHeldURI, Name: "held-leases", Title: "Leases this session holds",
		Description: "Every lease this session holds now, with its fencing token, and the losses not yet reported in a tool result.",
		MIMEType:    "application/json",
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return jsonResource(allHeldURI, s.status(false))
	})
}

// addHeldResource registers lease://held/{name}; the server tells the
// client that the resource list changed.
func (s *Server) addHeldResource(name string) {
	uri := heldURI + name
	s.srv.AddResource(&mcp.Resource{
		URI: uri, Name: name, Title: "Lease " + name + " (held)",
		Description: "This session's holding of lease " + name + ": its fencing token, renewed in the background. " +
			"Subscribe to hear at once when it is lost.",
		MIMEType: "application/json",
	}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		name := strings.TrimPrefix(req.Params.URI, heldURI)
		s.sweep()
		s.mu.Lock()
		h := s.held[name]
		var v HeldLease
		if h != nil {
			v = heldView(h, s.window())
		}
		s.mu.Unlock()
		if h == nil {
			return nil, mcp.ResourceNotFoundError(req.Params.URI)
		}
		return jsonResource(req.Params.URI, v)
	})
}

// removeHeldResource unregisters lease://held/{name}.
func (s *Server) removeHeldResource(name string) { s.srv.RemoveResources(heldURI + name) }

// notifyLost tells the client that a holding was lost: a logging message
// and an update of the holding's resource, which then goes away.
//
// MCP logging is deprecated from protocol 2026-07-28 on (SEP-2577) but is
// what the clients of the earlier versions, most of them today, show; the
// resource update is the channel that stays.
func (s *Server) notifyLost(l LostLease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ss := s.session(); ss != nil {
		//lint:ignore SA1019 logging is how clients of protocols before 2026-07-28 hear of it (see above)
		_ = ss.Log(ctx, &mcp.LoggingMessageParams{
			Level:  "error",
			Logger: "leasectl",
			Data: map[string]any{
				"event": "lease_lost", "name": l.Name, "fencingToken": l.FencingToken, "reason": l.Reason,
				"message": fmt.Sprintf("Lease %q (fencing token %d) is LOST: stop acting as its holder now. %s", l.Name, l.FencingToken, l.Reason),
			},
		})
	}
	_ = s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: heldURI + l.Name})
	s.mu.Lock()
	again := s.held[l.Name] != nil // acquired again meanwhile: its resource stays
	s.mu.Unlock()
	if !again {
		s.removeHeldResource(l.Name)
	}
}

// notifyYield tells the client that a candidate of higher priority asks
// for a holding of the session: a logging message (level warning) and an
// update of the holding's resource.
func (s *Server) notifyYield(y YieldRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ss := s.session(); ss != nil {
		//lint:ignore SA1019 logging is how clients of protocols before 2026-07-28 hear of it (see notifyLost)
		_ = ss.Log(ctx, &mcp.LoggingMessageParams{
			Level:  "warning",
			Logger: "leasectl",
			Data: map[string]any{
				"event": "yield_requested", "name": y.Name, "fencingToken": y.FencingToken, "yieldTo": y.YieldTo,
				"message": yieldMessage(y),
			},
		})
	}
	_ = s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: heldURI + y.Name})
}

func jsonResource(uri string, v any) (*mcp.ReadResourceResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}
