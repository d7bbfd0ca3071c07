package httpapi_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/httpapi"
	"github.com/leasesvc/leasesvc/session"
)

// BenchmarkSessionHeartbeat measures one heartbeat and its ack over a
// session socket holding one lease, in process: the instance's share of
// it is what docs/performance.md's sessionscale measures from outside
// (go test -bench SessionHeartbeat -cpuprofile for where it goes).
func BenchmarkSessionHeartbeat(b *testing.B) {
	in := newSessionInstance(b, memory.New(), session.Config{MessageRate: 1 << 20}, httpapi.Config{})
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, strings.Replace(in.srv.URL, "http", "ws", 1)+httpapi.SessionsPath,
		&websocket.DialOptions{Subprotocols: []string{httpapi.SessionSubprotocol}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	roundTrip := func(msg string) map[string]any {
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			b.Fatal(err)
		}
		_, data, err := c.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var m map[string]any
		_ = json.Unmarshal(data, &m)
		return m
	}
	roundTrip(`{"type":"open","id":1,"windowMs":60000}`)
	if m := roundTrip(`{"type":"acquire","id":2,"name":"bench","holder":"h"}`); m["type"] != "result" {
		b.Fatalf("acquire: %v", m)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"heartbeat","id":`+strconv.Itoa(i+3)+`}`)); err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Read(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
