package auth

// Verb is what a request does to a lease. Verbs are ordered: Admin implies
// Acquire, and Acquire implies Read, so a grant of a verb also grants every
// verb below it.
type Verb string

// The verbs, from weakest to strongest.
const (
	// Read covers get, list and watch.
	Read Verb = "read"
	// Acquire covers acquire, renew and release, and implies Read.
	Acquire Verb = "acquire"
	// Admin covers operator actions such as revoke, and implies Acquire.
	Admin Verb = "admin"
)

// numVerbs is the number of valid verbs; level returns 1..numVerbs.
const numVerbs = 3

// level is v's rank: 1 for Read, 2 for Acquire, 3 for Admin and 0 for
// anything else.
func (v Verb) level() int {
	switch v {
	case Read:
		return 1
	case Acquire:
		return 2
	case Admin:
		return 3
	}
	return 0
}

// Valid reports whether v is Read, Acquire or Admin.
func (v Verb) Valid() bool { return v.level() > 0 }

// Implies reports whether a grant of v also grants w: every valid verb
// implies itself, Admin implies Acquire and Read, Acquire implies Read.
// An invalid verb implies nothing and is implied by nothing.
func (v Verb) Implies(w Verb) bool {
	return v.Valid() && w.Valid() && v.level() >= w.level()
}
