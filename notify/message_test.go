package notify_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/notify"
)

func sampleEvent(typ lease.EventType, token int64) lease.Event {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 123456000, time.UTC)
	l := lease.Lease{Record: lease.Record{Name: "team-a.scheduler", Holder: "agent-2", FencingToken: token, TTL: 30 * time.Second, AcquireTime: t0, RenewTime: t0, ExpireTime: t0.Add(30 * time.Second), Transitions: token, Metadata: json.RawMessage(`{"addr":"x"}`)}, ServerTime: t0}
	ev := lease.Event{Type: typ, Lease: l, Time: t0}
	if typ == lease.EventAcquired && token > 1 {
		ev.PreviousHolder, ev.PreviousExpired = "agent-1", true
	}
	return ev
}

func TestEncodeAttributesAndData(t *testing.T) {
	msg, err := notify.Encode(sampleEvent(lease.EventAcquired, 2))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"ce-specversion": "1.0",
		"ce-type":        "dev.leasesvc.lease.acquired.v1",
		"ce-source":      "/leases/team-a.scheduler",
		"ce-id":          "team-a.scheduler/2/acquired",
		"ce-time":        "2026-11-21T12:00:00.123456Z",
		"content-type":   "application/json",
		"lease":          "team-a.scheduler",
		"fencingToken":   "2",
		"holder":         "agent-2",
	}
	for k, v := range want {
		if msg.Attributes[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, msg.Attributes[k], v)
		}
	}
	if len(msg.Attributes) != len(want) {
		t.Errorf("attributes %v, want exactly %v", msg.Attributes, want)
	}
	if msg.OrderingKey != "team-a.scheduler" {
		t.Errorf("ordering key %q, want the lease name", msg.OrderingKey)
	}
	var data map[string]any
	if err := json.Unmarshal(msg.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data["type"] != "acquired" || data["previousHolder"] != "agent-1" || data["previousExpired"] != true || data["eventTime"] != "2026-11-21T12:00:00.123456Z" {
		t.Errorf("data %s", msg.Data)
	}
	l, _ := data["lease"].(map[string]any)
	if l["fencingToken"] != 2.0 || l["held"] != true || l["remainingMs"] != 30000.0 {
		t.Errorf("data.lease %v, want the full lease as the API returns it", l)
	}
}

func TestFirstAcquireAndReleaseCarryNoPrevious(t *testing.T) {
	for _, ev := range []lease.Event{sampleEvent(lease.EventAcquired, 1), sampleEvent(lease.EventReleased, 3)} {
		msg, _ := notify.Encode(ev)
		var data map[string]any
		_ = json.Unmarshal(msg.Data, &data)
		if _, ok := data["previousHolder"]; ok {
			t.Errorf("%s: data has previousHolder: %s", ev.Type, msg.Data)
		}
		if _, ok := data["previousExpired"]; ok {
			t.Errorf("%s: data has previousExpired: %s", ev.Type, msg.Data)
		}
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	for _, ev := range []lease.Event{sampleEvent(lease.EventAcquired, 4), sampleEvent(lease.EventReleased, 4), sampleEvent(lease.EventExpired, 5)} {
		msg, err := notify.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := notify.Decode(msg.Data)
		if err != nil {
			t.Fatalf("Decode(%s): %v", msg.Data, err)
		}
		if got.Type != ev.Type || got.Lease.FencingToken != ev.Lease.FencingToken || !got.Lease.ExpireTime.Equal(ev.Lease.ExpireTime) ||
			!got.Time.Equal(ev.Time) || got.PreviousHolder != ev.PreviousHolder || got.PreviousExpired != ev.PreviousExpired ||
			string(got.Lease.Metadata) != string(ev.Lease.Metadata) {
			t.Errorf("round trip of %+v gave %+v", ev, got)
		}
	}
	for _, bad := range []string{`{`, `{"type":"stolen","lease":{"acquireTime":"2026-01-01T00:00:00Z","renewTime":"2026-01-01T00:00:00Z","expireTime":"2026-01-01T00:00:00Z","serverTime":"2026-01-01T00:00:00Z"},"eventTime":"2026-01-01T00:00:00Z"}`, `{"type":"acquired","lease":{},"eventTime":"x"}`} {
		if _, err := notify.Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%s) succeeded", bad)
		}
	}
}

func TestNewerOrdersByTokenThenType(t *testing.T) {
	a1, r1, a2, e2 := sampleEvent(lease.EventAcquired, 1), sampleEvent(lease.EventReleased, 1), sampleEvent(lease.EventAcquired, 2), sampleEvent(lease.EventExpired, 2)
	d2, a3 := sampleEvent(lease.EventDeleted, 2), sampleEvent(lease.EventAcquired, 3)
	seq := []lease.Event{a1, r1, a2, e2, d2, a3}
	for i := range seq {
		for j := range seq {
			if got, want := lease.Newer(seq[i], seq[j]), j > i; got != want {
				t.Errorf("Newer(%s/%d, %s/%d) = %v, want %v", seq[i].Type, seq[i].Lease.FencingToken, seq[j].Type, seq[j].Lease.FencingToken, got, want)
			}
		}
	}
}

// TestRevokedEvent: a revoked event carries its ce-type, the reason and the
// operator, the principals in the lease, and decodes back to the same.
func TestRevokedEvent(t *testing.T) {
	ev := sampleEvent(lease.EventRevoked, 3)
	ev.Lease.Principal, ev.Lease.RevokedBy, ev.Lease.RevokeReason = "agent@example.com", "oncall@example.com", "stuck"
	ev.Lease.ExpireTime = ev.Time
	ev.Reason, ev.Operator = "stuck", "oncall@example.com"
	msg, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Attributes["ce-type"] != "dev.leasesvc.lease.revoked.v1" || msg.Attributes["ce-id"] != "team-a.scheduler/3/revoked" {
		t.Fatalf("attributes %v, want the revoked ce-type and ce-id", msg.Attributes)
	}
	var data map[string]any
	if err := json.Unmarshal(msg.Data, &data); err != nil {
		t.Fatal(err)
	}
	l, _ := data["lease"].(map[string]any)
	if data["type"] != "revoked" || data["reason"] != "stuck" || data["operator"] != "oncall@example.com" ||
		l["principal"] != "agent@example.com" || l["revokedBy"] != "oncall@example.com" || l["held"] != false || data["previousHolder"] != nil {
		t.Fatalf("data %s, want type revoked with reason, operator and the lease's principals", msg.Data)
	}
	got, err := notify.Decode(msg.Data)
	if err != nil || got.Type != lease.EventRevoked || got.Reason != "stuck" || got.Operator != "oncall@example.com" ||
		got.Lease.Principal != "agent@example.com" || got.Lease.RevokeReason != "stuck" {
		t.Fatalf("Decode = %+v, %v; want the revoked event back", got, err)
	}
	// Other event types carry no reason or operator, even if set by mistake.
	rel := sampleEvent(lease.EventReleased, 3)
	rel.Reason = "x"
	msg, _ = notify.Encode(rel)
	var relData map[string]any
	if err := json.Unmarshal(msg.Data, &relData); err != nil || relData["reason"] != nil || relData["type"] != "released" {
		t.Fatalf("released event data %s has a reason", msg.Data)
	}
}

// TestSessionExpiredEvent: the released event of a holding whose session
// died (docs/contract.md §14) carries reason session_expired in the
// Pub/Sub message, and decodes back with it.
func TestSessionExpiredEvent(t *testing.T) {
	ev := sampleEvent(lease.EventReleased, 5)
	ev.Reason = lease.ReasonSessionExpired
	msg, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(msg.Data, &data); err != nil || data["reason"] != "session_expired" || msg.Attributes["ce-id"] != "team-a.scheduler/5/released" {
		t.Fatalf("message %s %v; want a released event with reason session_expired", msg.Data, msg.Attributes)
	}
	got, err := notify.Decode(msg.Data)
	if err != nil || got.Type != lease.EventReleased || got.Reason != lease.ReasonSessionExpired {
		t.Fatalf("Decode = %+v, %v; want the released event with its reason", got, err)
	}
}

// TestDeletedEvent: a deleted event (docs/contract.md §15) has its own
// ce-type, carries the operator and the reason, and decodes back.
func TestDeletedEvent(t *testing.T) {
	ev := sampleEvent(lease.EventDeleted, 4)
	ev.Lease.ExpireTime = ev.Time.Add(-time.Hour)
	ev.Reason, ev.Operator = "retention", "janitor@example.com"
	msg, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Attributes["ce-type"] != "dev.leasesvc.lease.deleted.v1" || msg.Attributes["ce-id"] != "team-a.scheduler/4/deleted" {
		t.Fatalf("attributes %v, want the deleted ce-type and ce-id", msg.Attributes)
	}
	got, err := notify.Decode(msg.Data)
	if err != nil || got.Type != lease.EventDeleted || got.Reason != "retention" || got.Operator != "janitor@example.com" || got.Lease.FencingToken != 4 {
		t.Fatalf("Decode = %+v, %v; want the deleted event back", got, err)
	}
}
