package notify

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasesvc/leasesvc/lease"
)

// TopicName returns the full name of topic: topic itself when it is already
// projects/P/topics/T, else the topic ID in project.
func TopicName(project, topic string) string {
	if strings.HasPrefix(topic, "projects/") {
		return topic
	}
	return "projects/" + project + "/topics/" + topic
}

// ListenConfig configures Listen.
type ListenConfig struct {
	// Topic is the events topic, an ID in the client's project or a full name.
	Topic string
	// Subscription is the ID of the subscription Listen creates for this
	// instance alone; it is deleted when Listen returns. Required.
	Subscription string
	// Handle receives every event, possibly more than once and out of
	// order (see lease.Newer); it must not block for long.
	Handle func(lease.Event)
	// Ready, if set, is called once the subscription exists, before the
	// first message can arrive.
	Ready func()
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
	// DeleteTimeout bounds the deletion of the subscription once ctx is
	// done. Default 5s.
	DeleteTimeout time.Duration
}

// Listen creates a subscription of this instance's own on the topic (with
// message ordering, and an expiration policy so a crashed instance's
// subscription is removed by Pub/Sub after a day unused), receives events
// until ctx is done, then deletes the subscription. Failures (Pub/Sub
// unreachable, the subscription gone) are logged and retried with backoff,
// recreating the subscription, until ctx is done; Listen returns nil then.
func Listen(ctx context.Context, client *pubsub.Client, cfg ListenConfig) error {
	if client == nil || cfg.Topic == "" || cfg.Subscription == "" || cfg.Handle == nil {
		return errors.New("notify: Listen: client, Topic, Subscription and Handle are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	name := "projects/" + client.Project() + "/subscriptions/" + cfg.Subscription
	spec := &pubsubpb.Subscription{
		Name:                     name,
		Topic:                    TopicName(client.Project(), cfg.Topic),
		EnableMessageOrdering:    true,
		AckDeadlineSeconds:       10,
		MessageRetentionDuration: durationpb.New(10 * time.Minute),
		ExpirationPolicy:         &pubsubpb.ExpirationPolicy{Ttl: durationpb.New(24 * time.Hour)},
	}
	defer func() {
		timeout := cfg.DeleteTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		defer cancel()
		if err := client.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: name}); err != nil {
			log.Warn("notify: delete subscription", "subscription", name, "err", err)
		}
	}()
	ready := cfg.Ready
	newBackoff := func() gax.Backoff {
		return gax.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Multiplier: 2}
	}
	bo := newBackoff()
	for {
		// (Re)create the subscription: Pub/Sub may have lost it (an emulator
		// restart; expiry after a long outage).
		_, err := client.SubscriptionAdminClient.CreateSubscription(ctx, spec)
		if err == nil || status.Code(err) == codes.AlreadyExists {
			if ready != nil {
				ready()
				ready = nil
			}
			started := time.Now()
			err = client.Subscriber(name).Receive(ctx, func(_ context.Context, m *pubsub.Message) {
				ev, err := Decode(m.Data)
				m.Ack() // a message that cannot be decoded never will be
				if err != nil {
					log.Warn("notify: undecodable event", "ce-id", m.Attributes["ce-id"], "err", err)
					return
				}
				cfg.Handle(ev)
			})
			if time.Since(started) > time.Minute {
				bo = newBackoff() // it worked for a while
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		pause := bo.Pause()
		log.Warn("notify: receiving events failed; retrying", "subscription", name, "err", err, "in", pause.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}
