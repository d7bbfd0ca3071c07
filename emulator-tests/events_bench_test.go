package emulatortests

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// BenchmarkLeadershipEvents measures, on the Firestore and Pub/Sub
// emulators with two service instances (one iteration = one sample of
// each):
//
//   - handoff: a release on A until the contender waiting on B holds;
//
//   - takeover: how long past a crashed holder's expireTime (server times)
//     the contender waiting on B holds;
//
//   - event: a release on A until a subscriber receives its event, beside
//     the floor: a direct publish until the same subscriber receives it.
//
//     go test ./emulator-tests -run '^$' -bench LeadershipEvents -benchtime 40x
func BenchmarkLeadershipEvents(b *testing.B) {
	topic, client := eventsTopic(b)
	sub := subscribe(b, client, topic)
	collection := uniqueCollection("bench")
	a := e2e.StartService(b, eventsEnv(b, collection, topic))
	bsvc := startListening(b, eventsEnv(b, collection, topic))
	ca, cb := e2e.Client{URL: a.URL}, e2e.Client{URL: bsvc.URL}
	floorPub := client.Publisher(topic)
	floorPub.EnableMessageOrdering = true
	defer floorPub.Stop()

	var handoff, takeover, event, floor latencies
	b.ResetTimer()
	for i := range b.N {
		name := e2e.UniqueName("bench" + strconv.Itoa(i))
		p := "/v1/leases/" + name

		// Graceful handoff and release → event.
		must(b, ca.Post(b, p+":acquire", `{"holder":"a","ttlMs":60000}`))
		got := make(chan e2e.Response, 1)
		go func() { got <- cb.Post(b, p+":acquire", `{"holder":"b","ttlMs":60000,"waitMs":10000}`) }()
		time.Sleep(200 * time.Millisecond) // b is waiting
		sent := time.Now()
		must(b, ca.Post(b, p+":release", `{"holder":"a","fencingToken":1}`))
		if r := <-got; r.Status != http.StatusOK || r.Token() != 2 {
			b.Fatalf("handoff: waiter got %d %s", r.Status, r.Raw)
		}
		handoff = append(handoff, time.Since(sent))
		at := sub.waitFor(b, name+"/1/released", 10*time.Second)
		event = append(event, at.Sub(sent))

		// Crash takeover: c holds with the shortest TTL and never renews.
		name2 := name + "-crash"
		p2 := "/v1/leases/" + name2
		held := must(b, ca.Post(b, p2+":acquire", `{"holder":"c","ttlMs":1000}`))
		r := cb.Post(b, p2+":acquire", `{"holder":"d","ttlMs":60000,"waitMs":10000}`)
		if r.Status != http.StatusOK || r.Token() != 2 {
			b.Fatalf("takeover: waiter got %d %s", r.Status, r.Raw)
		}
		expired, _ := time.Parse(time.RFC3339Nano, held.Body["expireTime"].(string))
		acquired, _ := time.Parse(time.RFC3339Nano, r.Body["acquireTime"].(string))
		takeover = append(takeover, acquired.Sub(expired))

		// The emulator's own floor: publish → receive on the same subscription.
		id := fmt.Sprintf("floor-%d-%d", i, time.Now().UnixNano())
		sent = time.Now()
		res := floorPub.Publish(b.Context(), &pubsub.Message{Data: []byte("{}"), OrderingKey: "floor",
			Attributes: map[string]string{"lease": "floor", "ce-id": id}})
		if _, err := res.Get(b.Context()); err != nil {
			b.Fatalf("floor publish: %v", err)
		}
		at = sub.waitFor(b, id, 10*time.Second)
		floor = append(floor, at.Sub(sent))
	}
	b.StopTimer()
	report(b, map[string]latencies{"handoff": handoff, "takeover": takeover, "event": event, "floor": floor})
}

func must(b *testing.B, r e2e.Response) e2e.Response {
	b.Helper()
	if r.Status != http.StatusOK {
		b.Fatalf("status %d: %s", r.Status, r.Raw)
	}
	return r
}

// waitFor returns when the message with ce-id id arrived.
func (s *subscriber) waitFor(tb testing.TB, id string, limit time.Duration) time.Time {
	tb.Helper()
	var at time.Time
	if !s.await(limit, func() bool {
		for _, m := range s.msgs {
			if m.attrs["ce-id"] == id {
				at = m.at
				return true
			}
		}
		return false
	}) {
		tb.Fatalf("message %s not received in %v", id, limit)
	}
	return at
}
