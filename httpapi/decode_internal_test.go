package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/internal/wire"
)

// TestObjectIsCompacted: an object member is kept compacted, so that a
// request held for a long wait keeps its object and not the megabyte of
// spaces a caller padded it with.
func TestObjectIsCompacted(t *testing.T) {
	raw := json.RawMessage(`{ "k" :` + strings.Repeat(" ", 1<<20) + `"v" }`)
	b := &body{fields: map[string]json.RawMessage{"metadata": raw}}
	got := b.object("metadata")
	if string(got) != `{"k":"v"}` || cap(got) > 64 {
		t.Fatalf("kept %d bytes (cap %d): %.40q; want the compacted object only", len(got), cap(got), got)
	}
	if len(b.bad) != 0 {
		t.Fatalf("violations %v", b.bad)
	}
	b = &body{fields: map[string]json.RawMessage{"metadata": json.RawMessage(`{"k": }`)}}
	if got := b.object("metadata"); string(got) != `{"k": }` {
		t.Fatalf("an object that is not JSON became %q; want it as sent, for the lease layer's check", got)
	}
}

// TestHeartbeatFastPath: the canonical heartbeat is read without the
// general parse, any other form is left to it, and the ack is encoded
// byte for byte as send encodes it.
func TestHeartbeatFastPath(t *testing.T) {
	for raw, want := range map[string]int64{
		`{"type":"heartbeat","id":1}`:                1,
		`{"type":"heartbeat","id":9007199254740991}`: 9007199254740991,
	} {
		if id, ok := heartbeatID([]byte(raw)); !ok || id != want {
			t.Fatalf("heartbeatID(%s) = %d, %v; want %d", raw, id, ok, want)
		}
	}
	for _, raw := range []string{
		`{"type":"heartbeat","id":0}`, `{"type":"heartbeat","id":01}`, `{"type":"heartbeat","id":-1}`,
		`{"type":"heartbeat","id":1.5}`, `{"type":"heartbeat","id":9007199254740992}`, `{"type":"heartbeat","id":}`,
		`{"type":"heartbeat","id":1,"x":2}`, `{"type":"heartbeat","id":1} `, `{"id":1,"type":"heartbeat"}`,
		`{"type":"heartbeat","id":99999999999999999}`,
	} {
		if _, ok := heartbeatID([]byte(raw)); ok {
			t.Fatalf("heartbeatID(%s) took a form the general parse must judge", raw)
		}
	}
	for _, re := range []int64{1, 42, 9007199254740991} {
		want, err := wire.Marshal(map[string]any{"type": "ack", "re": re})
		if err != nil {
			t.Fatal(err)
		}
		if got := ackMessage(re); string(got) != string(want) {
			t.Fatalf("ackMessage(%d) = %s; want %s", re, got, want)
		}
	}
}
