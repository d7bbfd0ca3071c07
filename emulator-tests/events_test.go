package emulatortests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// received is one message as a test subscriber saw it.
type received struct {
	attrs       map[string]string
	data        map[string]any
	orderingKey string
	at          time.Time
}

// eventsTopic creates a topic of the test's own on the Pub/Sub emulator and
// returns its ID and a client.
func eventsTopic(t testing.TB) (string, *pubsub.Client) {
	t.Helper()
	emulators.PubSub(t)
	client, err := pubsub.NewClient(t.Context(), emulators.Project())
	if err != nil {
		t.Fatalf("pubsub client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	topic := "events-" + hex.EncodeToString(b[:])
	createTopic(t, client, topic)
	return topic, client
}

func createTopic(t testing.TB, client *pubsub.Client, topic string) {
	t.Helper()
	name := "projects/" + emulators.Project() + "/topics/" + topic
	eventually(t, 20*time.Second, func() error {
		_, err := client.TopicAdminClient.CreateTopic(t.Context(), &pubsubpb.Topic{Name: name})
		if err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return err
		}
		return nil
	})
}

// subscribe creates an ordered subscription on topic and collects what it
// receives, from now until the test ends.
type subscriber struct {
	mu   sync.Mutex
	msgs []received
	got  e2e.Changes // notified at each message
}

// await returns once cond (called under s.mu) holds, testing it after each
// message received, and reports false if limit passed first.
func (s *subscriber) await(limit time.Duration, cond func() bool) bool {
	return s.got.Await(limit, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return cond()
	})
}

func subscribe(t testing.TB, client *pubsub.Client, topic string) *subscriber {
	t.Helper()
	s := &subscriber{}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "projects/" + emulators.Project() + "/subscriptions/test-" + hex.EncodeToString(b[:])
	create := func() error {
		_, err := client.SubscriptionAdminClient.CreateSubscription(t.Context(), &pubsubpb.Subscription{
			Name: name, Topic: "projects/" + emulators.Project() + "/topics/" + topic, EnableMessageOrdering: true, AckDeadlineSeconds: 10,
		})
		if err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return err
		}
		return nil
	}
	eventually(t, 20*time.Second, create)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = client.Subscriber(name).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
				r := received{attrs: m.Attributes, orderingKey: m.OrderingKey, at: time.Now()}
				_ = json.Unmarshal(m.Data, &r.data)
				m.Ack()
				s.mu.Lock()
				s.msgs = append(s.msgs, r)
				s.mu.Unlock()
				s.got.Notify()
			})
			if faultWait(ctx, 200*time.Millisecond) { // the emulator went away (a fault): recreate and go on
				_ = create()
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

// of returns the messages about one lease, in arrival order.
func (s *subscriber) of(lease string) []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []received
	for _, m := range s.msgs {
		if m.attrs["lease"] == lease {
			out = append(out, m)
		}
	}
	return out
}

// ids returns the distinct ce-ids about one lease, in first-arrival order.
func (s *subscriber) ids(lease string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range s.of(lease) {
		if id := m.attrs["ce-id"]; !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func eventually(t testing.TB, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done in %v: %v", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventsEnv is the environment of a leasesvc instance on the Firestore
// emulator (a shared collection) publishing to topic.
func eventsEnv(t testing.TB, collection, topic string) map[string]string {
	t.Helper()
	return map[string]string{
		"LEASESVC_BACKEND":              "firestore",
		"LEASESVC_PROJECT":              emulators.Project(),
		"LEASESVC_FIRESTORE_COLLECTION": collection,
		"LEASESVC_PUBSUB_TOPIC":         topic,
		emulators.FirestoreHostEnv:      emulators.Firestore(t),
		emulators.PubSubHostEnv:         emulators.PubSub(t),
	}
}

// startListening starts an instance and waits until its own subscription
// exists, so no event published after this returns is missed.
func startListening(t testing.TB, env map[string]string) *e2e.Service {
	t.Helper()
	svc := e2e.StartService(t, env)
	eventually(t, 20*time.Second, func() error {
		if !strings.Contains(svc.Output(), `"message":"events: listening"`) {
			return fmt.Errorf("instance not listening yet:\n%s", svc.Output())
		}
		return nil
	})
	return svc
}

// TestEventsEveryTypeOnce: every change of holding publishes exactly one
// event with the CloudEvents attributes and the lease name as ordering key;
// renewals, repeat acquires and repeat releases publish nothing; a holding
// that runs out is announced by the sweeper within about a second.
func TestEventsEveryTypeOnce(t *testing.T) {
	t.Parallel()
	topic, client := eventsTopic(t)
	sub := subscribe(t, client, topic)
	svc := e2e.StartService(t, eventsEnv(t, uniqueCollection("ev"), topic))
	c := e2e.Client{URL: svc.URL}
	name := e2e.UniqueName("events")
	p := "/v1/leases/" + name

	mustStatus(t, "acquire a", c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), http.StatusOK)
	mustStatus(t, "renew a", c.Post(t, p+":renew", `{"holder":"a","fencingToken":1}`), http.StatusOK)
	mustStatus(t, "acquire a again", c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), http.StatusOK)
	mustStatus(t, "release a", c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), http.StatusOK)
	mustStatus(t, "release a again", c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), http.StatusOK)
	b := mustStatus(t, "acquire b", c.Post(t, p+":acquire", `{"holder":"b","ttlMs":1000}`), http.StatusOK)
	expireB, _ := time.Parse(time.RFC3339Nano, b.Body["expireTime"].(string))
	want := []string{name + "/1/acquired", name + "/1/released", name + "/2/acquired", name + "/2/expired"}
	eventually(t, 15*time.Second, func() error {
		if got := sub.ids(name); len(got) < len(want) {
			return fmt.Errorf("events so far %v", got)
		}
		return nil
	})
	mustStatus(t, "acquire c after expiry", c.Post(t, p+":acquire", `{"holder":"c","ttlMs":60000}`), http.StatusOK)
	want = append(want, name+"/3/acquired")
	eventually(t, 15*time.Second, func() error {
		if got := sub.ids(name); len(got) < len(want) {
			return fmt.Errorf("events so far %v", got)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // anything extra would arrive now
	if got := sub.ids(name); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want exactly %v", got, want)
	}
	for _, m := range sub.of(name) {
		id := m.attrs["ce-id"]
		typ := id[strings.LastIndexByte(id, '/')+1:]
		token := strings.Split(id, "/")[1]
		wantAttrs := map[string]string{
			"ce-specversion": "1.0", "ce-type": "dev.leasesvc.lease." + typ + ".v1", "ce-source": "/leases/" + name,
			"lease": name, "fencingToken": token, "content-type": "application/json",
		}
		for k, v := range wantAttrs {
			if m.attrs[k] != v {
				t.Errorf("%s: attribute %s = %q, want %q", id, k, m.attrs[k], v)
			}
		}
		if m.orderingKey != name || m.data["type"] != typ || m.attrs["ce-time"] != m.data["eventTime"] || m.attrs["holder"] == "" {
			t.Errorf("%s: ordering key %q, data %v", id, m.orderingKey, m.data)
		}
		switch id {
		case name + "/2/acquired":
			if m.data["previousHolder"] != "a" || m.data["previousExpired"] != false {
				t.Errorf("%s: previous %v/%v, want a, released", id, m.data["previousHolder"], m.data["previousExpired"])
			}
		case name + "/3/acquired":
			if m.data["previousHolder"] != "b" || m.data["previousExpired"] != true {
				t.Errorf("%s: previous %v/%v, want b, expired", id, m.data["previousHolder"], m.data["previousExpired"])
			}
		case name + "/2/expired":
			if m.attrs["ce-time"] != b.Body["expireTime"] {
				t.Errorf("expired ce-time %s, want the holding's expireTime %s", m.attrs["ce-time"], b.Body["expireTime"])
			}
			if late := m.at.Sub(expireB); late > 1500*time.Millisecond {
				t.Errorf("expired event received %v after the expiry, want within about 1s", late)
			}
		}
	}
}

// TestReleaseOnAWakesWaiterOnB: two instances over one backend; a waiting
// acquire on B is woken by a release on A through Pub/Sub, long before the
// holding would have expired.
func TestReleaseOnAWakesWaiterOnB(t *testing.T) {
	t.Parallel()
	topic, _ := eventsTopic(t)
	collection := uniqueCollection("wake")
	a := e2e.StartService(t, eventsEnv(t, collection, topic))
	b := startListening(t, eventsEnv(t, collection, topic))
	ca, cb := e2e.Client{URL: a.URL}, e2e.Client{URL: b.URL}
	p := "/v1/leases/" + e2e.UniqueName("wake")
	mustStatus(t, "acquire on A", ca.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), http.StatusOK)

	got := make(chan e2e.Response, 1)
	go func() { got <- cb.Post(t, p+":acquire", `{"holder":"b","ttlMs":60000,"waitMs":30000}`) }()
	time.Sleep(500 * time.Millisecond) // the acquire on B is waiting
	released := time.Now()
	mustStatus(t, "release on A", ca.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), http.StatusOK)
	select {
	case r := <-got:
		if r.Status != http.StatusOK || r.Holder() != "b" || r.Token() != 2 {
			t.Fatalf("waiting acquire on B = %d %s, want 200 held by b with token 2", r.Status, r.Raw)
		}
		t.Logf("waiter on B held the lease %v after the release on A", time.Since(released))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter on B was not woken within 10s of the release on A (the holding had 60s left)")
	}
}

// TestPublishOutageLosesNothing stops the Pub/Sub emulator while leases
// change hands: every lease operation still succeeds, and every event
// arrives once Pub/Sub is back.
func TestPublishOutageLosesNothing(t *testing.T) {
	// Not parallel: it stops the emulator that other tests use.
	topic, client := eventsTopic(t)
	svc := e2e.StartService(t, eventsEnv(t, uniqueCollection("outage"), topic))
	c := e2e.Client{URL: svc.URL}
	emulators.StopPubSub(t)
	var names []string
	for i := range 3 {
		name := e2e.UniqueName(fmt.Sprintf("outage%d", i))
		names = append(names, name)
		p := "/v1/leases/" + name
		mustStatus(t, "acquire during the outage", c.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), http.StatusOK)
		mustStatus(t, "release during the outage", c.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), http.StatusOK)
		mustStatus(t, "acquire again during the outage", c.Post(t, p+":acquire", `{"holder":"b","ttlMs":60000}`), http.StatusOK)
	}
	emulators.RestartPubSub(t)
	createTopic(t, client, topic) // the restarted emulator has forgotten it
	sub := subscribe(t, client, topic)
	for _, name := range names {
		want := []string{name + "/1/acquired", name + "/1/released", name + "/2/acquired"}
		eventually(t, 60*time.Second, func() error {
			got := map[string]bool{}
			for _, id := range sub.ids(name) {
				got[id] = true
			}
			for _, id := range want {
				if !got[id] {
					return fmt.Errorf("%s: events so far %v", name, sub.ids(name))
				}
			}
			return nil
		})
		r := mustStatus(t, "get after the outage", c.Get(t, "/v1/leases/"+name), http.StatusOK)
		if r.Holder() != "b" || r.Token() != 2 {
			t.Fatalf("%s after the outage: %s", name, r.Raw)
		}
	}
}

// TestWatcherOnBSeesChangesOnA: a watch on instance B sees acquire, release
// and acquire made on instance A, in order.
func TestWatcherOnBSeesChangesOnA(t *testing.T) {
	t.Parallel()
	topic, _ := eventsTopic(t)
	collection := uniqueCollection("watch")
	a := e2e.StartService(t, eventsEnv(t, collection, topic))
	b := startListening(t, eventsEnv(t, collection, topic))
	name := e2e.UniqueName("watch")
	events := e2e.Watch(t, b.URL, name)
	if ev := events.Next(t); ev.Event != "lease" || ev.Data != "null" {
		t.Fatalf("first watch event %+v, want lease null", ev)
	}
	ca := e2e.Client{URL: a.URL}
	p := "/v1/leases/" + name
	mustStatus(t, "acquire a", ca.Post(t, p+":acquire", `{"holder":"a","ttlMs":60000}`), http.StatusOK)
	mustStatus(t, "release a", ca.Post(t, p+":release", `{"holder":"a","fencingToken":1}`), http.StatusOK)
	mustStatus(t, "acquire b", ca.Post(t, p+":acquire", `{"holder":"b","ttlMs":60000}`), http.StatusOK)
	for _, want := range []string{name + "/1/acquired", name + "/1/released", name + "/2/acquired"} {
		if ev := events.Next(t); ev.ID != want {
			t.Fatalf("watch event %+v, want %s", ev, want)
		}
	}
}
