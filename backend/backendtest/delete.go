package backendtest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// testDeleteKeepsTheToken: a deleted lease is not found to get, list,
// revoke, renew and release, but its tombstone keeps the fencing token and
// transitions, so the next acquire continues from them (docs/contract.md
// §15); the checkpoint and the metadata go with the lease.
func testDeleteKeepsTheToken(t *testing.T, e *env) {
	rec := &recorder{}
	m := e.manager(t, rec.add)
	name := e.name("del")
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: name}); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("Delete of a lease that never existed = %v, want ErrNotFound", err)
	}
	a, err := m.Acquire(t.Context(), lease.AcquireRequest{Name: name, Holder: "a", TTL: live, Metadata: json.RawMessage(`{"m":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: a.FencingToken, Checkpoint: json.RawMessage(`{"k":"v"}`)}); err != nil {
		t.Fatal(err)
	}
	rec.take()
	d, err := m.Delete(t.Context(), lease.DeleteRequest{Name: name, Operator: "oncall@example.com"})
	if err != nil {
		t.Fatalf("Delete of a released lease: %v", err)
	}
	if d.Name != name || d.Holder != "a" || d.FencingToken != 1 || d.Held() {
		t.Fatalf("Delete = %+v, want the lease as it was: holding 1 of a, not held", d)
	}
	evs := rec.take()
	if len(evs) != 1 || evs[0].Type != lease.EventDeleted || evs[0].Operator != "oncall@example.com" ||
		evs[0].Lease.FencingToken != 1 || !evs[0].Time.Equal(d.ServerTime) {
		t.Fatalf("events of Delete = %+v, want one deleted event of token 1 by oncall at the delete's serverTime", evs)
	}
	snap, err := e.recs.Get(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if r := snap.Record; !lease.Tombstone(r) || r.FencingToken != 1 || r.Transitions != 1 || r.Holder != "" ||
		r.Metadata != nil || r.Checkpoint != nil || !r.DeleteTime.Equal(d.ServerTime) {
		t.Fatalf("stored after Delete: %+v, want a tombstone of token 1 deleted at %v", r, d.ServerTime)
	}
	if sc, ok := e.Store.(backend.ExpiryScanner); ok { // the sweepers tell tombstones apart
		exp := snap.Record.ExpireTime
		recs, err := lease.ScanExpiry(t.Context(), sc, backend.Cursor{ExpireTime: exp.Add(-time.Millisecond)}, exp, 1000)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for i := range recs {
			if recs[i].Name == name {
				found = lease.Tombstone(&recs[i])
			}
		}
		if !found {
			t.Errorf("ScanExpiry around the deleted lease's expire time: no tombstone of %s among %d records", name, len(recs))
		}
	}
	if _, err := m.Get(t.Context(), name); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if res, err := m.List(t.Context(), lease.ListRequest{Prefix: e.prefix}); err != nil || len(res.Leases) != 0 {
		t.Errorf("List after Delete = %+v, %v; want no lease", res.Leases, err)
	}
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: name}); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("repeated Delete = %v, want ErrNotFound", err)
	}
	if _, err := m.Revoke(t.Context(), lease.RevokeRequest{Name: name, Reason: "r"}); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Revoke after Delete = %v, want ErrNotFound", err)
	}
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: name, Holder: "a", FencingToken: 1}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("the old holder's Release after Delete = %v, want ErrLost", err)
	}
	if _, err := m.Renew(t.Context(), lease.RenewRequest{Name: name, Holder: "a", FencingToken: 1}); !errors.Is(err, lease.ErrLost) {
		t.Errorf("the old holder's Renew after Delete = %v, want ErrLost", err)
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("events of refused operations on a deleted lease: %+v", evs)
	}
	b := acquire(t, m, name, "b")
	if b.FencingToken != 2 || b.Transitions != 2 || b.Checkpoint != nil || b.Metadata != nil || !b.AcquireTime.Equal(b.ServerTime) {
		t.Fatalf("Acquire after Delete = %+v, want token 2, transitions 2, no checkpoint or metadata", b)
	}
	evs = rec.take()
	if len(evs) != 1 || evs[0].Type != lease.EventAcquired || evs[0].PreviousHolder != "" || evs[0].Previous.FencingToken != 0 {
		t.Fatalf("events of the acquire after Delete = %+v, want one acquired event without a previous holding", evs)
	}
	if got := get(t, m, name); !sameState(got, b) {
		t.Fatalf("Get after the new acquire = %+v, want %+v", got, b)
	}
	if res, err := m.List(t.Context(), lease.ListRequest{Prefix: e.prefix}); err != nil || len(res.Leases) != 1 || res.Leases[0].FencingToken != 2 {
		t.Fatalf("List after the new acquire = %+v, %v; want the lease with token 2", res.Leases, err)
	}
}

// testDeleteRefusals: a held lease and a reserved one are not deleted, and
// a delete with FreeFor waits for the lease to have been free that long.
func testDeleteRefusals(t *testing.T, e *env) {
	rec := &recorder{}
	m := e.manager(t, rec.add)
	name := e.name("held")
	a := acquire(t, m, name, "a")
	var held *lease.HeldError
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: name}); !errors.As(err, &held) || held.Lease.Holder != "a" || held.Lease.FencingToken != 1 {
		t.Fatalf("Delete of a held lease = %v, want a HeldError with the holding of a", err)
	}
	if _, err := m.Transfer(t.Context(), lease.TransferRequest{Name: name, Holder: "a", FencingToken: a.FencingToken, To: "b", Reserve: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var reserved *lease.ReservedError
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: name}); !errors.As(err, &reserved) || reserved.ReservedFor != "b" {
		t.Fatalf("Delete of a lease reserved by a transfer = %v, want a ReservedError for b", err)
	}
	if l := get(t, m, name); l.FencingToken != 1 || l.ReservedFor != "b" {
		t.Fatalf("after refused deletes: %+v, want it unchanged", l)
	}

	idle := e.name("idle")
	c := acquire(t, m, idle, "c")
	if _, err := m.Release(t.Context(), lease.ReleaseRequest{Name: idle, Holder: "c", FencingToken: c.FencingToken}); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: idle, FreeFor: time.Hour}); !errors.Is(err, lease.ErrNotIdle) {
		t.Fatalf("Delete with FreeFor 1h of a lease free for less = %v, want ErrNotIdle", err)
	}
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: idle, FreeFor: -time.Second}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Delete with a negative FreeFor = %v, want ErrInvalid", err)
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Fatalf("events of refused deletes: %+v", evs)
	}
	e.pass(1500 * time.Millisecond)
	if _, err := m.Delete(t.Context(), lease.DeleteRequest{Name: idle, FreeFor: time.Second, Reason: "retention"}); err != nil {
		t.Fatalf("Delete with FreeFor 1s of a lease free for 1.5s: %v", err)
	}
	if evs := rec.take(); len(evs) != 1 || evs[0].Type != lease.EventDeleted || evs[0].Reason != "retention" {
		t.Fatalf("events of the retention delete = %+v, want one deleted event with its reason", evs)
	}
}
