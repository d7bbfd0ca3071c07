package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/client"
)

// TestDelete: Delete removes a free lease and returns it as it was; a held
// one is ErrHeld with the lease, a missing or deleted one ErrNotFound; a
// watch sees the deleted event; the next acquire gets the next token
// (docs/contract.md §15).
func TestDelete(t *testing.T) {
	s := newService(t, nil)
	c := s.client(t, client.Config{})
	ctx := t.Context()
	if _, err := c.Delete(ctx, "jobs.d"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Delete of a lease that never existed: %v, want ErrNotFound", err)
	}
	a, err := c.Acquire(ctx, "jobs.d", client.AcquireRequest{Holder: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var held *client.HeldError
	if _, err := c.Delete(ctx, "jobs.d"); !errors.Is(err, client.ErrHeld) || !errors.As(err, &held) || held.Lease.Holder != "a" {
		t.Fatalf("Delete of a held lease: %v, want ErrHeld with the lease", err)
	}
	w, err := c.Watch(ctx, "jobs.d")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	if ev, err := w.Next(); err != nil || ev.Type != client.EventState {
		t.Fatalf("first watch event %+v, %v", ev, err)
	}
	if _, err := c.Release(ctx, "jobs.d", "a", a.FencingToken); err != nil {
		t.Fatal(err)
	}
	d, err := c.Delete(ctx, "jobs.d")
	if err != nil || d.Name != "jobs.d" || d.Holder != "a" || d.FencingToken != 1 || d.Held {
		t.Fatalf("Delete = %+v, %v; want the lease as it was", d, err)
	}
	for _, want := range []client.EventType{client.EventReleased, client.EventDeleted} {
		if ev, err := w.Next(); err != nil || ev.Type != want || ev.Lease.FencingToken != 1 {
			t.Fatalf("watch event %+v, %v; want %s of token 1", ev, err, want)
		}
	}
	if _, err := c.Get(ctx, "jobs.d"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := c.Delete(ctx, "jobs.d"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("repeated Delete: %v, want ErrNotFound", err)
	}
	if b, err := c.Acquire(ctx, "jobs.d", client.AcquireRequest{Holder: "b", TTL: time.Minute}); err != nil || b.FencingToken != 2 {
		t.Fatalf("Acquire after Delete = %+v, %v; want token 2", b, err)
	}
}

// TestDeletedEventOrder: a deleted event parses and ranks after every
// other event of its token, before the next holding.
func TestDeletedEventOrder(t *testing.T) {
	ev := func(typ client.EventType, token int64) client.Event {
		return client.Event{Type: typ, Lease: client.Lease{Name: "x", FencingToken: token}}
	}
	seq := []client.Event{ev(client.EventAcquired, 1), ev(client.EventExpired, 1), ev(client.EventDeleted, 1), ev(client.EventAcquired, 2)}
	for i := range seq {
		for j := range seq {
			if got := client.Newer(seq[i], seq[j]); got != (j > i) {
				t.Errorf("Newer(%s, %s) = %v", seq[i].ID(), seq[j].ID(), got)
			}
		}
	}
	if got, err := client.ParseEvent([]byte(`{"type":"deleted","lease":{"name":"x","fencingToken":3},"operator":"ops","eventTime":"2026-11-26T10:00:00Z"}`)); err != nil || got.Type != client.EventDeleted || got.Operator != "ops" {
		t.Fatalf("ParseEvent(deleted) = %+v, %v", got, err)
	}
}
