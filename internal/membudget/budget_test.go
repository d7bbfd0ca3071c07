package membudget

import (
	"slices"
	"sync"
	"testing"
)

func TestChargeBounds(t *testing.T) {
	b, err := New(100, 60)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Charge("a", 60) {
		t.Fatal("a's whole share refused")
	}
	if b.Charge("a", 1) {
		t.Fatal("a charged past its share")
	}
	if !b.Charge("b", 40) {
		t.Fatal("b refused within the total")
	}
	if b.Charge("c", 1) {
		t.Fatal("c charged past the instance total")
	}
	b.Release("a", 10)
	if !b.Charge("c", 10) {
		t.Fatal("c refused after a gave back 10")
	}
	st := b.Stats()
	if st.Used != 100 || st.Refused != 2 || st.Callers != 3 {
		t.Fatalf("stats %+v; want used 100, refused 2, 3 callers", st)
	}
	b.Release("a", 50)
	b.Release("b", 40)
	b.Release("c", 10)
	if st := b.Stats(); st.Used != 0 || st.Callers != 0 {
		t.Fatalf("stats after every release %+v; want nothing held", st)
	}
}

func TestNewRefusesNoTotal(t *testing.T) {
	if _, err := New(0, 1); err == nil {
		t.Fatal("a zero budget was accepted")
	}
	b, err := New(10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Share() != 10 {
		t.Fatalf("share %d; want the total when unset", b.Share())
	}
}

func TestReleaseMoreThanHeldPanics(t *testing.T) {
	b, _ := New(10, 10)
	b.Charge("a", 1)
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than held did not panic")
		}
	}()
	b.Release("a", 2)
}

func TestAccount(t *testing.T) {
	b, _ := New(100, 100)
	a := b.Account("x")
	if !a.Grow(70) || a.Grow(31) {
		t.Fatal("account grew past the budget, or refused within it")
	}
	a.Shrink(20)
	if a.Held() != 50 || b.Used("x") != 50 {
		t.Fatalf("held %d, budget %d after shrinking; want 50", a.Held(), b.Used("x"))
	}
	a.Shrink(1000) // more than held: gives back what it has
	if a.Held() != 0 || b.Used("x") != 0 {
		t.Fatalf("held %d after over-shrinking; want 0", a.Held())
	}
	a.Grow(30)
	a.Close()
	a.Close()
	if b.Stats().Used != 0 {
		t.Fatal("Close left bytes charged")
	}
	if a.Grow(1) {
		t.Fatal("a closed account grew")
	}
}

func TestNilBudget(t *testing.T) {
	var b *Budget
	if !b.Charge("a", 1<<40) {
		t.Fatal("a nil budget refused")
	}
	b.Release("a", 1<<40)
	a := b.Account("a")
	if !a.Grow(1 << 40) {
		t.Fatal("a nil budget's account refused")
	}
	a.Close()
}

func TestConcurrentAccounts(t *testing.T) {
	b, _ := New(1000, 1000)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := b.Account(string(rune('a' + i%5)))
			for range 100 {
				if a.Grow(7) {
					a.Shrink(3)
				}
			}
			a.Close()
		}()
	}
	wg.Wait()
	if st := b.Stats(); st.Used != 0 || st.Callers != 0 {
		t.Fatalf("stats %+v after every account closed; want nothing held", st)
	}
}

// TestHeaviest: callers come heaviest first, ties by name, at most n.
func TestHeaviest(t *testing.T) {
	b, err := New(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Charge("a", 10)
	b.Charge("b", 30)
	b.Charge("c", 30)
	b.Charge("d", 5)
	if got := b.Heaviest(3); !slices.Equal(got, []string{"b", "c", "a"}) {
		t.Fatalf("Heaviest(3) = %v; want [b c a]", got)
	}
	b.Release("b", 30)
	if got := b.Heaviest(10); !slices.Equal(got, []string{"c", "a", "d"}) {
		t.Fatalf("after b released: %v; want [c a d]", got)
	}
}

// TestAccountRefusal: an account says which limit refused its last refused
// Grow, as decided when it was refused, whatever was released since.
func TestAccountRefusal(t *testing.T) {
	b, _ := New(100, 60)
	a, other := b.Account("a"), b.Account("b")
	if a.Refusal() != Granted {
		t.Fatalf("fresh account: %v", a.Refusal())
	}
	if !a.Grow(50) || a.Grow(20) {
		t.Fatal("want 50 granted and 20 more refused by a's share of 60")
	}
	a.Shrink(50) // released after the refusal: the reason stays the share
	if a.Refusal() != ByShare {
		t.Fatalf("after a share refusal: %v, want ByShare", a.Refusal())
	}
	if !other.Grow(60) || !a.Grow(30) || a.Grow(20) {
		t.Fatal("want 60 for b, 30 for a, then 20 more for a refused by the total of 100")
	}
	if a.Refusal() != ByTotal {
		t.Fatalf("after a total refusal: %v, want ByTotal", a.Refusal())
	}
	if !a.Grow(5) || a.Refusal() != ByTotal {
		t.Fatalf("a granted Grow changed the last refusal: %v", a.Refusal())
	}
	a.Close()
	if a.Grow(1) || a.Refusal() != ByTotal {
		t.Fatalf("closed account: %v, want a refusal", a.Refusal())
	}
}
