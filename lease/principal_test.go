package lease_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

const (
	alice = "alice@example.com"
	bob   = "bob@example.com"
)

// TestTransferReservedForPrincipal: with authentication on, a transfer's
// reservation is for its successor as the transferring principal (or the
// one it names), not for whoever acquires under the successor's holder
// name: another principal is refused and gets neither the lease nor its
// checkpoint.
func TestTransferReservedForPrincipal(t *testing.T) {
	ctx := t.Context()
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	handOver := func(name, toPrincipal string) {
		t.Helper()
		l, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "w", TTL: time.Minute, Principal: alice})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Transfer(ctx, lease.TransferRequest{Name: name, Holder: "w", FencingToken: l.FencingToken, To: "succ",
			Checkpoint: []byte(`{"secret":1}`), Reserve: time.Minute, Principal: alice, ToPrincipal: toPrincipal}); err != nil {
			t.Fatal(err)
		}
	}
	acquire := func(name, principal string) (lease.Lease, error) {
		return m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "succ", TTL: time.Minute, Principal: principal})
	}

	handOver("own", "")
	if _, err := acquire("own", bob); !errors.Is(err, lease.ErrReserved) {
		t.Fatalf("bob's acquire as the successor of alice's transfer = %v, want ErrReserved", err)
	}
	if l, err := acquire("own", alice); err != nil || l.FencingToken != 2 || l.Principal != alice {
		t.Fatalf("alice's acquire as the successor = %+v, %v; want token 2 bound to alice", l, err)
	}

	handOver("named", bob)
	if _, err := acquire("named", alice); !errors.Is(err, lease.ErrReserved) {
		t.Fatalf("alice's acquire as the successor of a transfer to bob = %v, want ErrReserved", err)
	}
	if l, err := acquire("named", bob); err != nil || l.FencingToken != 2 || l.Principal != bob || string(l.Checkpoint) != `{"secret":1}` {
		t.Fatalf("bob's acquire as the named successor = %+v, %v; want token 2 bound to bob, with the checkpoint", l, err)
	}

	if err := lease.ValidateTransfer(lease.TransferRequest{Name: "x", Holder: "w", FencingToken: 1, To: "s", ToPrincipal: "a b"}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("a ToPrincipal with a space = %v, want ErrInvalid", err)
	}
}

// TestRegistrationOwnedByPrincipal: a waiting acquire of another principal
// under the same holder name registers beside a candidate's registration;
// it does not replace it (its priority and preemption, and so the yield
// request it makes, stay), and taking the lease under that name does not
// remove it.
func TestRegistrationOwnedByPrincipal(t *testing.T) { synctest.Test(t, registrationOwnedByPrincipal) }

// registrationOwnedByPrincipal is TestRegistrationOwnedByPrincipal's body, run in a synctest bubble: fake time.
func registrationOwnedByPrincipal(t *testing.T) {
	ctx := t.Context()
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const name = "shared"
	if _, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "leader", TTL: time.Minute, Principal: "ops"}); err != nil {
		t.Fatal(err)
	}
	waitCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(waitCtx, lease.AcquireRequest{Name: name, Holder: "cand", TTL: time.Minute, Principal: alice,
			Wait: time.Minute, Candidate: true, Priority: 500, Preempt: true})
		done <- err
	}()
	defer func() {
		stop()
		<-done
	}()
	get := func() lease.Lease {
		t.Helper()
		l, err := m.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	synctest.Wait() // the registration is written by the waiter's goroutine
	if get().YieldTo() != "cand" {
		t.Fatal("alice's candidate never registered")
	}
	// bob waits under alice's holder name with priority 0, briefly.
	if _, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "cand", TTL: time.Minute, Principal: bob,
		Wait: time.Millisecond, Candidate: true}); !errors.Is(err, lease.ErrHeld) {
		t.Fatalf("bob's waiting acquire = %v, want ErrHeld", err)
	}
	l := get()
	if l.YieldTo() != "cand" {
		t.Fatalf("after bob's acquire the holding is asked to yield to %q, want cand (alice's request stands)", l.YieldTo())
	}
	found := false
	for _, c := range l.Candidates {
		if c.Principal == alice {
			found = c.Priority == 500 && c.Preempt
		}
	}
	if !found {
		t.Fatalf("alice's registration is gone or changed: %+v", l.Candidates)
	}
	// The holder lets go; bob acquires as "cand" — but the lease is
	// reserved for alice's candidate.
	if _, err := m.Release(ctx, lease.ReleaseRequest{Name: name, Holder: "leader", FencingToken: l.FencingToken, Principal: "ops"}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Acquire(ctx, lease.AcquireRequest{Name: name, Holder: "cand", TTL: time.Minute, Principal: bob}); err == nil && got.Principal == bob {
		t.Fatalf("bob took the lease reserved for alice's candidate under her holder name: %+v", got)
	}
}
