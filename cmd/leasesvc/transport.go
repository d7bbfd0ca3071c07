package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/notify"
)

// topicRE matches a topic ID (3–255 characters, starting with a letter) or
// a full topic name.
var topicRE = regexp.MustCompile(`^(projects/[a-z][a-z0-9.:-]{4,61}[a-z0-9]/topics/)?[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)

// newTransport chooses how this instance's changes of holding reach the
// other instances, the one place that does: Pub/Sub when
// LEASESVC_PUBSUB_TOPIC is set (a topic ID in LEASESVC_PROJECT, or
// GOOGLE_CLOUD_PROJECT, or a full projects/P/topics/T; the subscription is
// leasesvc-<instance>, and observe gets every publish attempt); else the
// backend's own notifications when it has them (backend.NotifierOf); else
// none (nil): events stay on this instance.
func newTransport(ctx context.Context, getenv func(string) string, store backend.Store, instance string, log *slog.Logger, observe func(notify.Attempt)) (notify.Transport, error) {
	topic := getenv("LEASESVC_PUBSUB_TOPIC")
	if topic == "" {
		if n, ok := backend.NotifierOf(store); ok {
			return notify.NewNotifier(n, instance, log), nil
		}
		return nil, nil
	}
	if !topicRE.MatchString(topic) {
		return nil, fmt.Errorf("LEASESVC_PUBSUB_TOPIC=%q: want a topic ID of 3–255 characters starting with a letter, or projects/P/topics/T", topic)
	}
	project := getenv("LEASESVC_PROJECT")
	if project == "" {
		project = getenv("GOOGLE_CLOUD_PROJECT")
	}
	if p, _, ok := strings.Cut(strings.TrimPrefix(topic, "projects/"), "/topics/"); ok && project == "" {
		project = p
	}
	if project == "" {
		return nil, errors.New("LEASESVC_PUBSUB_TOPIC is a topic ID: set LEASESVC_PROJECT (or GOOGLE_CLOUD_PROJECT), or give projects/P/topics/T")
	}
	t, err := notify.NewPubSub(ctx, notify.PubSubConfig{Project: project, Topic: topic, Subscription: "leasesvc-" + instance, Logger: log, Observe: observe})
	if err != nil {
		return nil, err
	}
	return t, nil
}
