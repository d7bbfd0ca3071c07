package proofkey_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/internal/proofkey"
	"github.com/leasesvc/leasesvc/lease"
)

// publish starts an instance's Issuer on store; Reread 1ns so that every
// unknown kid reads the backend.
func publish(t *testing.T, store backend.Store, instance string, cfg proofkey.Config) *proofkey.Issuer {
	t.Helper()
	cfg.Instance, cfg.Reread = instance, time.Nanosecond
	i, err := proofkey.Publish(t.Context(), store, cfg)
	if err != nil {
		t.Fatalf("Publish %s: %v", instance, err)
	}
	return i
}

// verify checks proof against the JWKS that via serves, asking for kid.
func verify(t *testing.T, via *proofkey.Issuer, kid, proof string) (fence.Claims, error) {
	t.Helper()
	doc, err := via.JWKS(t.Context(), kid)
	if err != nil {
		t.Fatalf("JWKS: %v", err)
	}
	keys, err := fence.ParseJWKS(doc)
	if err != nil {
		t.Fatalf("ParseJWKS: %v", err)
	}
	v, _ := fence.NewVerifier(keys, proofkey.DefaultIssuer)
	return v.Verify(t.Context(), proof)
}

func held(name string, token int64) lease.Lease {
	return lease.Lease{Record: lease.Record{Name: name, Holder: "agent", FencingToken: token, Principal: "p@example.com", AcquireTime: time.Unix(1_800_000_000, 0)}}
}

// TestTwoInstances: a proof issued by either instance verifies through
// either's JWKS (an unknown kid makes the route read the backend), and
// after an instance stops, its proofs verify within the retention and not
// after.
func TestTwoInstances(t *testing.T) {
	clock := memory.NewManualClock(time.Unix(1_800_000_000, 0))
	store := memory.New(memory.WithClock(clock.Now))
	cfg := proofkey.Config{Retention: time.Hour}
	a, b := publish(t, store, "a", cfg), publish(t, store, "b", cfg)
	pa, _ := a.Sign(held("orders", 3))
	pb, _ := b.Sign(held("orders", 4))
	for _, via := range []*proofkey.Issuer{a, b} {
		for _, tc := range []struct{ kid, proof string }{{a.Kid(), pa}, {b.Kid(), pb}} {
			c, err := verify(t, via, tc.kid, tc.proof)
			if err != nil {
				t.Fatalf("proof under %s through %s's JWKS: %v", tc.kid, via.Kid(), err)
			}
			if c.Lease != "orders" || c.Holder != "agent" || c.Principal != "p@example.com" || c.IssuedAt != 1_800_000_000 {
				t.Errorf("claims %+v", c)
			}
		}
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	a2 := publish(t, store, "a", cfg) // a restarted: a new key
	clock.Advance(time.Hour - time.Millisecond)
	if _, err := verify(t, a2, "unknown", pa); err != nil {
		t.Fatalf("the stopped instance's proof within the retention: %v", err)
	}
	clock.Advance(time.Millisecond)
	if _, err := verify(t, a2, "unknown", pa); !errors.Is(err, fence.ErrUnknownKey) {
		t.Fatalf("the stopped instance's proof after the retention: %v, want ErrUnknownKey", err)
	}
	if _, err := verify(t, a2, "unknown", pb); err != nil {
		t.Fatalf("the live instance's proof: %v", err)
	}
}

// TestMaxKeys: the list is capped, the instance's own key always in it and
// the others latest expiry first.
func TestMaxKeys(t *testing.T) {
	clock := memory.NewManualClock(time.Unix(1_800_000_000, 0))
	store := memory.New(memory.WithClock(clock.Now))
	cfg := proofkey.Config{MaxKeys: 2}
	old := publish(t, store, "old", cfg)
	if err := old.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	live := publish(t, store, "live", cfg)
	self := publish(t, store, "self", cfg)
	doc, err := self.JWKS(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := fence.ParseJWKS(doc)
	if len(keys) != 2 || keys[self.Kid()] == nil || keys[live.Kid()] == nil {
		t.Fatalf("listed %d keys %v, want self %s and live %s", len(keys), keys, self.Kid(), live.Kid())
	}
}

// TestHidden: no request acquires a key record's name.
func TestHidden(t *testing.T) {
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Acquire(t.Context(), lease.AcquireRequest{Name: lease.KeyRecordPrefix + "x", Holder: "h", TTL: time.Minute})
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("acquire of a key record name: %v, want ErrInvalid", err)
	}
}
