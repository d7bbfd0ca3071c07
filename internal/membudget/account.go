package membudget

import "sync"

// Account is the running charge of one client object (a stream, a session's
// out queue, a socket): it grows as the object queues bytes and shrinks as
// they are written out, and Close gives back whatever is left. Its methods
// are safe for concurrent use; after Close, Grow refuses and Shrink does
// nothing.
type Account struct {
	b      *Budget
	caller string

	mu      sync.Mutex
	held    int64
	closed  bool
	refusal Refusal // of the last refused Grow
}

// Account opens an account for caller. A nil budget gives an account that
// counts but never refuses.
func (b *Budget) Account(caller string) *Account {
	return &Account{b: b, caller: caller}
}

// Grow charges n more bytes; false (nothing charged) when the budget
// cannot meet it or the account is closed.
func (a *Account) Grow(n int64) bool {
	if n <= 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		a.refusal = ByTotal
		return false
	}
	if r := a.b.charge(a.caller, n); r != Granted {
		a.refusal = r
		return false
	}
	a.held += n
	return true
}

// Refusal says which limit refused the account's last refused Grow
// (Granted if none was refused; ByTotal after Close).
func (a *Account) Refusal() Refusal {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refusal
}

// Shrink gives back n bytes (at most what the account holds).
func (a *Account) Shrink(n int64) {
	if n <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > a.held {
		n = a.held
	}
	a.held -= n
	a.b.Release(a.caller, n)
}

// Held returns the bytes the account holds now.
func (a *Account) Held() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held
}

// Close gives back everything the account holds; later Grows refuse.
// Closing twice is harmless.
func (a *Account) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.b.Release(a.caller, a.held)
	a.held, a.closed = 0, true
}
