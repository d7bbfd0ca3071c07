package rawsession

import "testing"

// TestWireFastPaths: a heartbeat is written in the instance's one fast
// form, and an ack in the instance's encoding is read without the general
// parse, with the answer the general parse gives; any other message is
// left to it.
func TestWireFastPaths(t *testing.T) {
	if got := string(heartbeatMessage(42)); got != `{"type":"heartbeat","id":42}` {
		t.Errorf("heartbeat: %s", got)
	}
	for _, tc := range []struct {
		raw string
		re  int64
		ok  bool
	}{
		{`{"re":7,"type":"ack"}`, 7, true},
		{`{"re":123456789012,"type":"ack"}`, 123456789012, true},
		{`{"type":"ack","re":7}`, 0, false},
		{`{"re":,"type":"ack"}`, 0, false},
		{`{"re":-7,"type":"ack"}`, 0, false},
		{`{"re":7,"type":"ack","x":1}`, 0, false},
		{`{"re":7,"type":"result"}`, 0, false},
	} {
		re, ok := ackOf([]byte(tc.raw))
		if re != tc.re || ok != tc.ok {
			t.Errorf("ackOf(%s) = %d, %v; want %d, %v", tc.raw, re, ok, tc.re, tc.ok)
		}
	}
}
