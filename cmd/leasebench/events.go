package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// eventWait bounds the wait for one event.
const eventWait = 10 * time.Second

// events measures event delivery: an acquire and a release on the first
// URL, each until its event arrives, on a watch stream of the second URL or,
// with -pubsub-topic, on a Pub/Sub subscription of the test's own (beside
// the Pub/Sub floor: a publish until the same subscription receives it).
func events(ctx context.Context, b *bench) ([]row, error) {
	if b.cfg.topic != "" {
		return pubsubEvents(ctx, b)
	}
	first, second := b.cfg.urls[0], b.second()
	name := b.cfg.prefix + ".events"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := b.svc.watch(wctx, second, name)
	if err != nil {
		return nil, err
	}
	var acquired, released series
	for i := range b.cfg.samples {
		sent := time.Now()
		a, err := must(b.svc.acquire(ctx, first, name, "a", time.Minute, 0))
		if err != nil {
			return nil, err
		}
		at, err := eventAt(stream, fmt.Sprintf("%s/%d/acquired", name, a.lease.FencingToken))
		if err != nil {
			return nil, err
		}
		acquired = append(acquired, at.Sub(sent))
		sent = time.Now()
		if _, err := must(b.svc.release(ctx, first, name, "a", a.lease.FencingToken)); err != nil {
			return nil, err
		}
		if at, err = eventAt(stream, fmt.Sprintf("%s/%d/released", name, a.lease.FencingToken)); err != nil {
			return nil, err
		}
		released = append(released, at.Sub(sent))
		b.progress(false, "events: %d/%d", i+1, b.cfg.samples)
	}
	note := "watch stream on the " + map[bool]string{true: "same", false: "second"}[first == second] + " instance"
	return []row{
		{Scenario: "events", Metric: "acquire sent → acquired event p50", Unit: "ms", Service: acquired.q(0.5), N: len(acquired), Note: note},
		{Scenario: "events", Metric: "acquire sent → acquired event p99", Unit: "ms", Service: acquired.q(0.99), N: len(acquired), Note: note},
		{Scenario: "events", Metric: "release sent → released event p50", Unit: "ms", Service: released.q(0.5), N: len(released), Note: note},
		{Scenario: "events", Metric: "release sent → released event p99", Unit: "ms", Service: released.q(0.99), N: len(released), Note: note},
	}, nil
}

// arrivals records when each message (by ce-id) first arrived.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (a *arrivals) wait(ctx context.Context, id string) (time.Time, error) {
	deadline := time.Now().Add(eventWait)
	for time.Now().Before(deadline) {
		a.mu.Lock()
		t, ok := a.at[id]
		a.mu.Unlock()
		if ok {
			return t, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return time.Time{}, fmt.Errorf("no message %s within %v", id, eventWait)
}

func pubsubEvents(ctx context.Context, b *bench) ([]row, error) {
	project, topic := b.cfg.project, b.cfg.topic
	if p, _, ok := strings.Cut(strings.TrimPrefix(topic, "projects/"), "/topics/"); ok && strings.HasPrefix(topic, "projects/") {
		project = p
	} else {
		topic = "projects/" + project + "/topics/" + topic
	}
	client, err := pubsub.NewClient(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("pubsub client for %s: %w", project, err)
	}
	defer func() { _ = client.Close() }()
	var r [4]byte
	_, _ = rand.Read(r[:])
	sub := "projects/" + project + "/subscriptions/leasebench-" + hex.EncodeToString(r[:])
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, EnableMessageOrdering: true, AckDeadlineSeconds: 10,
	}); err != nil {
		return nil, fmt.Errorf("create subscription on %s: %w", topic, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.SubscriptionAdminClient.DeleteSubscription(dctx, &pubsubpb.DeleteSubscriptionRequest{Subscription: sub})
	}()
	got := &arrivals{at: map[string]time.Time{}}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = client.Subscriber(sub).Receive(rctx, func(_ context.Context, m *pubsub.Message) {
			now := time.Now()
			m.Ack()
			got.mu.Lock()
			if _, seen := got.at[m.Attributes["ce-id"]]; !seen {
				got.at[m.Attributes["ce-id"]] = now
			}
			got.mu.Unlock()
		})
	})
	defer func() { stop(); wg.Wait() }()
	pub := client.Publisher(topic)
	pub.EnableMessageOrdering = true
	defer pub.Stop()

	first := b.cfg.urls[0]
	name := b.cfg.prefix + ".pubsub"
	var acquired, released, floor series
	for i := range b.cfg.samples {
		sent := time.Now()
		a, err := must(b.svc.acquire(ctx, first, name, "a", time.Minute, 0))
		if err != nil {
			return nil, err
		}
		at, err := got.wait(ctx, fmt.Sprintf("%s/%d/acquired", name, a.lease.FencingToken))
		if err != nil {
			return nil, err
		}
		acquired = append(acquired, at.Sub(sent))
		sent = time.Now()
		if _, err := must(b.svc.release(ctx, first, name, "a", a.lease.FencingToken)); err != nil {
			return nil, err
		}
		if at, err = got.wait(ctx, fmt.Sprintf("%s/%d/released", name, a.lease.FencingToken)); err != nil {
			return nil, err
		}
		released = append(released, at.Sub(sent))
		id := fmt.Sprintf("leasebench-floor-%d-%d", i, time.Now().UnixNano())
		sent = time.Now()
		if _, err := pub.Publish(ctx, &pubsub.Message{Data: []byte("{}"), OrderingKey: "leasebench-floor",
			Attributes: map[string]string{"ce-id": id}}).Get(ctx); err != nil {
			return nil, fmt.Errorf("floor publish: %w", err)
		}
		if at, err = got.wait(ctx, id); err != nil {
			return nil, err
		}
		floor = append(floor, at.Sub(sent))
		b.progress(false, "events: %d/%d", i+1, b.cfg.samples)
	}
	note := "Pub/Sub subscription " + sub
	return []row{
		{Scenario: "events", Metric: "acquire sent → acquired message p50", Unit: "ms", Service: acquired.q(0.5), N: len(acquired), Note: note},
		{Scenario: "events", Metric: "acquire sent → acquired message p99", Unit: "ms", Service: acquired.q(0.99), N: len(acquired)},
		{Scenario: "events", Metric: "release sent → released message p50", Unit: "ms", Service: released.q(0.5), N: len(released)},
		{Scenario: "events", Metric: "release sent → released message p99", Unit: "ms", Service: released.q(0.99), N: len(released)},
		{Scenario: "events", Metric: "Pub/Sub floor: publish → receive p50", Unit: "ms", Service: floor.q(0.5), N: len(floor)},
		{Scenario: "events", Metric: "Pub/Sub floor: publish → receive p99", Unit: "ms", Service: floor.q(0.99), N: len(floor)},
	}, nil
}
