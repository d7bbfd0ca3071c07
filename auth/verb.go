package auth

// Verb is what a request does to a lease. A grant of a verb also grants
// the verbs it implies: Acquire and Delete each imply Read, and Admin
// implies all of them. Acquire and Delete do not imply each other, so a
// clean-up job may delete leases it may not lead, and a leader may not
// delete (docs/security.md).
type Verb string

// The verbs.
const (
	// Read covers get, list and watch.
	Read Verb = "read"
	// Acquire covers acquire, renew, release and transfer, and implies Read.
	Acquire Verb = "acquire"
	// Delete covers deleting a lease nobody holds (docs/contract.md §15),
	// and implies Read.
	Delete Verb = "delete"
	// Admin covers operator actions such as revoke, and implies every
	// other verb.
	Admin Verb = "admin"
)

// numVerbs is the number of valid verbs; index returns 1..numVerbs.
const numVerbs = 4

// index is v's position among the verbs, 1..numVerbs, and 0 for anything
// else.
func (v Verb) index() int {
	switch v {
	case Read:
		return 1
	case Acquire:
		return 2
	case Delete:
		return 3
	case Admin:
		return 4
	}
	return 0
}

// implied is the set of verbs a grant of v grants, as bits 1<<(index-1).
func (v Verb) implied() uint8 {
	switch v {
	case Read:
		return 1
	case Acquire:
		return 1 | 2
	case Delete:
		return 1 | 4
	case Admin:
		return 1 | 2 | 4 | 8
	}
	return 0
}

// Valid reports whether v is Read, Acquire, Delete or Admin.
func (v Verb) Valid() bool { return v.index() > 0 }

// Implies reports whether a grant of v also grants w: every valid verb
// implies itself and Read, Admin implies every verb. An invalid verb
// implies nothing and is implied by nothing.
func (v Verb) Implies(w Verb) bool {
	return w.Valid() && v.implied()&(1<<(w.index()-1)) != 0
}
