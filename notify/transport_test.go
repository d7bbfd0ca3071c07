package notify_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/lease"
	"github.com/leasesvc/leasesvc/notify"
)

// stuck is a backend.Notifier whose Notify waits until its context ends,
// as one that lost its database does.
type stuck struct{ sending chan struct{} }

func (s stuck) Notify(ctx context.Context, _ string) error {
	select {
	case s.sending <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

func (stuck) Listen(ctx context.Context, _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestNotifierDropsWhenItsQueueIsFull: Publish never blocks: past the
// queue it answers ErrDropped at once.
func TestNotifierDropsWhenItsQueueIsFull(t *testing.T) {
	s := stuck{sending: make(chan struct{}, 1)}
	n := notify.NewNotifier(s, "a", slog.New(slog.DiscardHandler))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_ = n.Close(ctx)
	}()
	ev := sampleEvent(lease.EventAcquired, 1)
	if err := n.Publish(ev); err != nil {
		t.Fatalf("first Publish = %v", err)
	}
	<-s.sending // the sender holds the first event; the queue is empty
	for i := 0; ; i++ {
		err := n.Publish(ev)
		if errors.Is(err, notify.ErrDropped) {
			if i == 0 {
				t.Fatal("dropped with an empty queue")
			}
			return
		}
		if err != nil || i > 1_000_000 {
			t.Fatalf("Publish %d = %v, want nil until the queue is full, then ErrDropped", i, err)
		}
	}
}

// TestPubSubDropsAfterClose: the Pub/Sub transport answers ErrDropped for
// an event published after Close, and insists on its settings.
func TestPubSubDropsAfterClose(t *testing.T) {
	t.Setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1") // never dialled: nothing is published
	log := slog.New(slog.DiscardHandler)
	if _, err := notify.NewPubSub(t.Context(), notify.PubSubConfig{Project: "p-1234", Topic: "t-1"}); err == nil {
		t.Error("NewPubSub without a Subscription succeeded")
	}
	p, err := notify.NewPubSub(t.Context(), notify.PubSubConfig{Project: "p-1234", Topic: "t-1", Subscription: "leasesvc-a", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := p.Publish(sampleEvent(lease.EventAcquired, 1)); !errors.Is(err, notify.ErrDropped) {
		t.Fatalf("Publish after Close = %v, want ErrDropped", err)
	}
}
