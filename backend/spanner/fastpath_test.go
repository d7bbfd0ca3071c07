package spanner

import (
	"fmt"
	"testing"

	"github.com/leasesvc/leasesvc/backend"
)

func TestParseFastPath(t *testing.T) {
	for _, m := range []FastPath{FastPathAdaptive, FastPathAlways, FastPathNever} {
		got, err := ParseFastPath(m.String())
		if err != nil || got != m {
			t.Errorf("ParseFastPath(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	for _, bad := range []string{"", "true", "Always", "sometimes"} {
		if _, err := ParseFastPath(bad); err == nil {
			t.Errorf("ParseFastPath(%q) succeeded", bad)
		}
	}
}

func TestPathHints(t *testing.T) {
	var h pathHints
	if h.readFirst("a") {
		t.Fatal("an unknown name reads first; it should be expected to write")
	}
	h.record("a", false)
	if !h.readFirst("a") {
		t.Fatal("after an Update that wrote nothing, the next one should read first")
	}
	h.record("a", true)
	if h.readFirst("a") {
		t.Fatal("after an Update that wrote, the next one should go straight to the transaction")
	}
	for i := range maxHints + 5 {
		h.record(fmt.Sprint(i), false)
	}
	if len(h.wrote) > maxHints {
		t.Fatalf("%d hints kept, want at most %d", len(h.wrote), maxHints)
	}
}

// Package lease finds ExpectWrite through backend.WriteExpecter.
var _ backend.WriteExpecter = (*Store)(nil)

// TestExpectWrite checks that a waiter woken after refusals goes straight to
// the transaction, and that a refusal makes the next Update read first again.
func TestExpectWrite(t *testing.T) {
	s := &Store{fastPath: FastPathAdaptive}
	s.hints.record("a", false) // the waiter's refused attempt
	if !s.hints.readFirst("a") {
		t.Fatal("after a refusal the next Update should read first")
	}
	s.ExpectWrite("a") // woken: the holding may have ended
	if s.hints.readFirst("a") {
		t.Fatal("after ExpectWrite the next Update should go straight to the transaction")
	}
	if s.hints.readFirst("b") {
		t.Fatal("ExpectWrite of a changed the path of b")
	}
	s.hints.record("a", false) // the guess was wrong: refused in the transaction
	if !s.hints.readFirst("a") {
		t.Fatal("a refusal after ExpectWrite should make the next Update read first again")
	}
}
