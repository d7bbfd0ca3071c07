package session_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/session"
)

// slots returns the registry's taken and spare slots as one pair.
func slots(r *session.Registry) [2]int {
	t, s := r.Slots()
	return [2]int{t, s}
}

// TestSlotsCountFromTheUpgrade: an admitted socket takes a slot before it
// opens anything; at the caller's and the instance's limits Admit refuses
// and takes nothing; the slot passes to the session it opens, and a
// released slot (the socket closed without open) is given back.
func TestSlotsCountFromTheUpgrade(t *testing.T) {
	r := newRegistry(t, session.Manager{M: manager(t, memory.New())}, session.Config{MaxPerCaller: 2, MaxSessions: 3})
	var limit *session.LimitError
	a1, err := r.Admit("a")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := r.Admit("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admit("a"); !errors.As(err, &limit) || limit.What != "sessions of this caller" {
		t.Fatalf("a third socket of a: %v; want the caller's limit", err)
	}
	// Sockets count against open: a's two unopened sockets leave it no
	// session to open.
	if _, _, err := r.Open(t.Context(), "a", "", time.Second, newPushes()); !errors.As(err, &limit) {
		t.Fatalf("an open beside two unopened sockets: %v; want a LimitError", err)
	}
	b1, err := r.Admit("b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Admit("c"); !errors.As(err, &limit) || limit.What != "sessions of this instance" {
		t.Fatalf("a fourth socket: %v; want the instance's limit", err)
	}
	if got := slots(r); got != [2]int{3, 0} {
		t.Fatalf("slots %v after three admits; want [3 0]", got)
	}
	s, _, err := a1.Open(t.Context(), "", time.Second, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	a1.Release() // passed to the session: nothing given back
	if got := slots(r); got != [2]int{3, 0} {
		t.Fatalf("slots %v after an open; want [3 0]: the slot passed to the session", got)
	}
	a2.Release()
	b1.Release()
	b1.Release()
	if got := slots(r); got != [2]int{1, 0} {
		t.Fatalf("slots %v after two sockets closed unopened; want [1 0]", got)
	}
	if _, _, err := a1.Open(t.Context(), "", time.Second, newPushes()); err == nil {
		t.Fatal("a slot opened twice")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := slots(r); got != [2]int{0, 0} {
		t.Fatalf("slots %v after the session closed; want none", got)
	}
}

// TestSpareSlotResumesHere: a caller at its limit whose session's socket
// dropped gets a spare slot for the socket that comes back here, and it
// resumes the session without a second slot; a spare slot cannot open,
// and there are no more spare slots than sessions of the caller here.
func TestSpareSlotResumesHere(t *testing.T) {
	r := newRegistry(t, session.Manager{M: manager(t, memory.New())}, session.Config{MaxPerCaller: 1})
	first, err := r.Admit("a")
	if err != nil {
		t.Fatal(err)
	}
	_, id, err := first.Open(t.Context(), "", time.Second, newPushes())
	if err != nil {
		t.Fatal(err)
	}
	spare, err := r.Admit("a")
	if err != nil {
		t.Fatalf("a socket of a caller at its limit with a session here: %v; want a spare slot", err)
	}
	var limit *session.LimitError
	if _, err := r.Admit("a"); !errors.As(err, &limit) {
		t.Fatalf("a second spare socket for one session: %v; want a LimitError", err)
	}
	if _, _, err := spare.Open(t.Context(), "", time.Second, newPushes()); !errors.As(err, &limit) {
		t.Fatalf("open on a spare slot: %v; want a LimitError", err)
	}
	ns, _, _, err := spare.Resume(t.Context(), "", id, 2, 0, nil, newPushes(), nil)
	if err != nil {
		t.Fatalf("resume on a spare slot of a session here: %v", err)
	}
	defer ns.Close(context.Background())
	spare.Release()
	if got := slots(r); got != [2]int{1, 0} || r.Len() != 1 {
		t.Fatalf("slots %v, %d sessions after the move; want [1 0], 1", got, r.Len())
	}
	// The session moves again: a spare slot again.
	sp, err := r.Admit("a")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Release()
	if _, _, _, err := sp.Resume(t.Context(), "", id, 3, 0, nil, newPushes(), nil); err != nil {
		t.Fatalf("a second move of the same session on a spare slot: %v", err)
	}
}

// TestAdmitWhileShuttingDown: no socket is admitted once shutdown began.
func TestAdmitWhileShuttingDown(t *testing.T) {
	r := newRegistry(t, session.Manager{M: manager(t, memory.New())}, session.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r.Shutdown(ctx, ctx)
	if _, err := r.Admit("a"); !errors.Is(err, session.ErrShuttingDown) {
		t.Fatalf("admit after shutdown: %v; want ErrShuttingDown", err)
	}
}

// TestSpareSlotsInsideTheInstanceCap: spare sockets count against
// MaxSessions: an instance full of sessions and spares admits no socket
// more, spare or not, and the sockets never pass the cap.
func TestSpareSlotsInsideTheInstanceCap(t *testing.T) {
	r := newRegistry(t, session.Manager{M: manager(t, memory.New())}, session.Config{MaxPerCaller: 1, MaxSessions: 3})
	for _, caller := range []string{"a", "b"} {
		sl, err := r.Admit(caller)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := sl.Open(t.Context(), "", time.Second, newPushes()); err != nil {
			t.Fatal(err)
		}
	}
	spare, err := r.Admit("a") // a's session moving: the third socket
	if err != nil {
		t.Fatalf("a spare socket within the cap: %v", err)
	}
	var limit *session.LimitError
	if _, err := r.Admit("b"); !errors.As(err, &limit) || limit.What != "sessions of this instance" {
		t.Fatalf("a spare socket past the instance cap: %v; want the instance's LimitError", err)
	}
	if _, err := r.Admit("c"); !errors.As(err, &limit) {
		t.Fatalf("a new caller's socket past the instance cap: %v; want a LimitError", err)
	}
	if got := slots(r); got[0]+got[1] != 3 {
		t.Fatalf("slots %v; want 3 sockets in all", got)
	}
	spare.Release()
	if sp, err := r.Admit("b"); err != nil {
		t.Fatalf("a spare socket once one was given back: %v", err)
	} else {
		sp.Release()
	}
}
