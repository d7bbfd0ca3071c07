package emulatortests

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasesvc/leasesvc/emulator-tests/emulators"
	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestSIGTERMFlushesEventsAndDeletesSubscription sends SIGTERM to the real
// binary with acquires waiting (60 s), a :watch stream open and a Pub/Sub
// topic set (the emulator): the waits are answered at once with 503
// unavailable and Retry-After: 1, the stream ends, the event of the last
// change before SIGTERM is published, the instance's subscription is
// deleted, telemetry is flushed, and the process exits within 9 s.
func TestSIGTERMFlushesEventsAndDeletesSubscription(t *testing.T) {
	t.Parallel()
	topic, client := eventsTopic(t)
	sub := subscribe(t, client, topic)
	var b [4]byte
	_, _ = rand.Read(b[:])
	instance := "shutdown-" + hex.EncodeToString(b[:])
	svc := startListening(t, map[string]string{
		"LEASESVC_BACKEND":      "memory",
		"LEASESVC_PROJECT":      emulators.Project(),
		"LEASESVC_PUBSUB_TOPIC": topic,
		"LEASESVC_INSTANCE_ID":  instance,
		"LEASESVC_TELEMETRY":    "stdout",
		emulators.PubSubHostEnv: emulators.PubSub(t),
	})
	subName := "projects/" + emulators.Project() + "/subscriptions/leasesvc-" + instance
	if _, err := client.SubscriptionAdminClient.GetSubscription(t.Context(), &pubsubpb.GetSubscriptionRequest{Subscription: subName}); err != nil {
		t.Fatalf("the instance's subscription %s: %v", subName, err)
	}
	last := e2e.UniqueName("last")
	took := e2e.Shutdown(t, svc, func() { // a change just before SIGTERM: its event is still buffered
		if r := (e2e.Client{URL: svc.URL}).Post(t, "/v1/leases/"+last+":acquire", `{"holder":"z","ttlMs":60000}`); r.Status != http.StatusOK {
			t.Fatalf("acquire: %s", r.Raw)
		}
	})
	_, err := client.SubscriptionAdminClient.GetSubscription(t.Context(), &pubsubpb.GetSubscriptionRequest{Subscription: subName})
	if status.Code(err) != codes.NotFound {
		t.Errorf("the instance's subscription after exit: %v, want NotFound (deleted)", err)
	}
	eventually(t, 20*time.Second, func() error {
		if len(sub.of(last)) != 1 {
			return fmt.Errorf("the last change's event was not published (got %d)", len(sub.of(last)))
		}
		return nil
	})
	out := svc.Output()
	i := strings.Index(out, "shutting down")
	if i < 0 || !strings.Contains(out[i:], `"Name":"leasesvc.`) || !strings.Contains(out[i:], "events: publisher closed") {
		t.Errorf("after the shutdown began, no publisher close or no metrics flushed:\n%.4000s", out[max(i, 0):])
	}
	t.Logf("exited %v after SIGTERM", took)
}
