package leadercache

import (
	"context"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Subscribe creates a subscription of its own, with message ordering, on
// the service's events topic (an ID in ps's project, or projects/P/topics/T)
// and returns its Subscriber and a function that deletes it. The
// subscription expires after a day without a subscriber, so one left behind
// by a crashed process goes away by itself. Give each cache process its own
// subscriptionID (a cache needs every event, not a share of them).
func Subscribe(ctx context.Context, ps *pubsub.Client, topic, subscriptionID string) (*pubsub.Subscriber, func(context.Context) error, error) {
	project := ps.Project()
	if !strings.HasPrefix(topic, "projects/") {
		topic = "projects/" + project + "/topics/" + topic
	}
	name := "projects/" + project + "/subscriptions/" + subscriptionID
	_, err := ps.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name:                  name,
		Topic:                 topic,
		EnableMessageOrdering: true,
		AckDeadlineSeconds:    10,
		ExpirationPolicy:      &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(24 * time.Hour)},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("leadercache: create subscription %s on %s: %w", name, topic, err)
	}
	del := func(ctx context.Context) error {
		if err := ps.SubscriptionAdminClient.DeleteSubscription(ctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name}); err != nil {
			return fmt.Errorf("leadercache: delete subscription %s: %w", name, err)
		}
		return nil
	}
	return ps.Subscriber(name), del, nil
}
