package leadercache

import (
	"encoding/json"
	"testing"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/client"
)

// TestHandleRevokedMessage: a Pub/Sub message of a revoked event, as the
// service publishes it, ends the holding; a message of a type the cache
// does not know is counted as malformed, acknowledged and changes nothing
// (the entry falls back to its TTL re-read).
func TestHandleRevokedMessage(t *testing.T) {
	svc, err := client.New("http://127.0.0.1:1", client.Config{}) // never called: only messages here
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(svc, nil, Config{})
	if err != nil {
		t.Fatal(err)
	}
	lease := func(held bool, extra string) string {
		b, _ := json.Marshal(held)
		return `{"name":"jobs","holder":"agent-a","fencingToken":7,"ttlMs":30000,"held":` + string(b) + `,"metadata":{}` + extra + `}`
	}
	handle := func(typ, data string) {
		c.handle(t.Context(), &pubsub.Message{ID: "m-" + typ, Data: []byte(data), Attributes: map[string]string{
			"ce-specversion": "1.0", "ce-type": "dev.leasesvc.lease." + typ + ".v1", "ce-source": "/leases/jobs",
			"ce-id": "jobs/7/" + typ, "lease": "jobs", "fencingToken": "7", "holder": "agent-a",
		}})
	}
	handle("acquired", `{"type":"acquired","lease":`+lease(true, "")+`,"eventTime":"2026-11-21T18:00:00Z"}`)
	if l, _ := c.Peek("jobs"); !l.Held || l.FencingToken != 7 {
		t.Fatalf("after acquired: %+v", l)
	}
	handle("revoked", `{"type":"revoked","lease":`+lease(false, `,"revokedBy":"ops@example.com","revokeReason":"stuck"`)+
		`,"reason":"stuck","operator":"ops@example.com","eventTime":"2026-11-21T18:00:05Z"}`)
	handle("suspended", `{"type":"suspended","lease":`+lease(true, "")+`,"eventTime":"2026-11-21T18:00:06Z"}`)
	l, _ := c.Peek("jobs")
	if l.Held || l.Source != "revoked" || l.Holder != "agent-a" || l.Lease.RevokedBy != "ops@example.com" || l.Lease.RevokeReason != "stuck" {
		t.Fatalf("after revoked (and an unknown type): %+v; want not held, from the revoked event", l)
	}
	if s := c.Stats(); s.Events != 2 || s.Malformed != 1 || s.Dropped != 0 {
		t.Fatalf("stats %+v, want 2 events and 1 malformed", s)
	}
}
