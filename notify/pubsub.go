package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"

	"github.com/leasesvc/leasesvc/lease"
)

// PubSubConfig configures NewPubSub.
type PubSubConfig struct {
	// Project is the client's project; Topic is an ID in it, or
	// projects/P/topics/T. Both required.
	Project, Topic string
	// Subscription is the ID of the subscription of this instance alone
	// that Subscribe creates and deletes (ListenConfig.Subscription).
	// Required.
	Subscription string
	// Logger receives failures and the transport's start and end. Default
	// slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called after every publish attempt, for metrics
	// (PublisherConfig.Observe).
	Observe func(Attempt)
}

// PubSub is the Transport over a Cloud Pub/Sub topic: a Publisher, and a
// subscription of this instance's own (Listen).
type PubSub struct {
	client *pubsub.Client
	pub    *Publisher
	cfg    PubSubConfig
}

// NewPubSub connects to Pub/Sub (a client of cfg.Project) and starts the
// Publisher to cfg.Topic. It does not check that the topic exists.
func NewPubSub(ctx context.Context, cfg PubSubConfig) (*PubSub, error) {
	if cfg.Project == "" || cfg.Topic == "" || cfg.Subscription == "" {
		return nil, errors.New("notify: NewPubSub: Project, Topic and Subscription are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	client, err := pubsub.NewClient(ctx, cfg.Project)
	if err != nil {
		return nil, fmt.Errorf("pubsub client for project %q: %w", cfg.Project, err)
	}
	pub, err := NewPublisher(client, TopicName(cfg.Project, cfg.Topic), PublisherConfig{Logger: cfg.Logger, Observe: cfg.Observe})
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("events publisher: %w", err)
	}
	return &PubSub{client: client, pub: pub, cfg: cfg}, nil
}

// Publish implements Transport.Publish (Publisher.Publish).
func (p *PubSub) Publish(ev lease.Event) error {
	if !p.pub.Publish(ev) {
		return ErrDropped
	}
	return nil
}

// Subscribe implements Transport.Subscribe (Listen): h.Event gets every
// event of the topic, this instance's own included; h.Ended is not called.
func (p *PubSub) Subscribe(ctx context.Context, h Handler) error {
	return Listen(ctx, p.client, ListenConfig{
		Topic: p.cfg.Topic, Subscription: p.cfg.Subscription, Logger: p.cfg.Logger, DeleteTimeout: 2 * time.Second,
		Handle: h.Event,
		Ready:  func() { p.cfg.Logger.Info("events: listening", "subscription", p.cfg.Subscription) },
	})
}

// Close implements Transport.Close: it flushes the Publisher (Close), logs
// its counts and closes the client.
func (p *PubSub) Close(ctx context.Context) error {
	var errs []error
	if err := p.pub.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	s := p.pub.Stats()
	p.cfg.Logger.Info("events: publisher closed", "published", s.Published, "failedAttempts", s.Failed, "dropped", s.Dropped)
	if err := p.client.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close pubsub client: %w", err))
	}
	return errors.Join(errs...)
}
