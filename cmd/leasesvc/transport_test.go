package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
)

// notifyingStore is a Store whose backend offers notifications, as
// PostgreSQL's does.
type notifyingStore struct {
	*memory.Store
}

func (notifyingStore) Notify(context.Context, string) error { return nil }

func (notifyingStore) Listen(ctx context.Context, _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestTransportChoice: a Pub/Sub topic wins; without one, a backend with
// notifications carries the events; without either, there is no transport
// (a nil interface, not a nil pointer in one); a bad topic names the
// setting.
func TestTransportChoice(t *testing.T) {
	t.Setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:1") // never dialled: nothing is published
	log := slog.New(slog.DiscardHandler)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	var _ backend.Notifier = notifyingStore{}
	for _, c := range []struct {
		name  string
		env   func(string) string
		store backend.Store
		want  string // the transport's type; "" for none
	}{
		{"memory, no topic", env(nil), memory.New(), ""},
		{"notifier, no topic", env(nil), notifyingStore{memory.New()}, "*notify.Notifier"},
		{"notifier and topic", env(map[string]string{"LEASESVC_PUBSUB_TOPIC": "leasesvc-events", "LEASESVC_PROJECT": "p-1234"}), notifyingStore{memory.New()}, "*notify.PubSub"},
		{"memory, full topic name", env(map[string]string{"LEASESVC_PUBSUB_TOPIC": "projects/p-1234/topics/leasesvc-events"}), memory.New(), "*notify.PubSub"},
	} {
		tr, err := newTransport(t.Context(), c.env, c.store, "i-1", log, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := ""
		if tr != nil {
			got = fmt.Sprintf("%T", tr)
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			if err := tr.Close(ctx); err != nil {
				t.Errorf("%s: Close = %v", c.name, err)
			}
			cancel()
		}
		if got != c.want {
			t.Errorf("%s: transport %q, want %q", c.name, got, c.want)
		}
	}
	for _, bad := range []func(string) string{
		env(map[string]string{"LEASESVC_PUBSUB_TOPIC": "x", "LEASESVC_PROJECT": "p-1234"}),
		env(map[string]string{"LEASESVC_PUBSUB_TOPIC": "leasesvc-events"}),
	} {
		if tr, err := newTransport(t.Context(), bad, notifyingStore{memory.New()}, "i-1", log, nil); err == nil || !strings.Contains(err.Error(), "LEASESVC_") || tr != nil {
			t.Errorf("newTransport(topic %q) = %v, %v; want an error naming the setting", bad("LEASESVC_PUBSUB_TOPIC"), tr, err)
		}
	}
}
