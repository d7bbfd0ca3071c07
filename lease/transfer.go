package lease

import (
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxPrincipalLen is the longest principal a transfer may name as its
// successor's (ToPrincipal), in bytes.
const MaxPrincipalLen = 256

// TransferRequest ends a holding and reserves the lease for a named
// successor (docs/contract.md §8 transfer).
type TransferRequest struct {
	// Name is the lease name.
	Name string
	// Holder is the caller's identity.
	Holder string
	// FencingToken is the token of the caller's holding.
	FencingToken int64
	// To is the successor's holder identity; it must differ from Holder.
	To string
	// Checkpoint, a JSON object, replaces the lease's checkpoint; nil keeps
	// it.
	Checkpoint json.RawMessage
	// Reserve is how long the lease stays reserved for To (1ms …
	// MaxTransferReserve); 0 means DefaultTransferReserve.
	Reserve time.Duration
	// Principal is the authenticated caller; it must be the holding's.
	Principal string
	// ToPrincipal is the principal whose acquire as To takes the reserved
	// lease; "" means Principal, the transfer's own. Anyone else's acquire
	// as To is refused with a *ReservedError, as a stranger's is.
	ToPrincipal string
	// Session, if set, transfers through that session: the holding must be
	// held through it at its epoch, or the transfer is ErrLost.
	Session *SessionRef
}

// ValidateTransfer checks req and returns an *InvalidError naming every bad
// field, or nil.
func ValidateTransfer(req TransferRequest) error {
	_, err := checkTransfer(req)
	return err
}

func checkTransfer(req TransferRequest) (checkpoint []byte, err error) {
	var v violations
	checkName(&v, req.Name)
	checkHolder(&v, req.Holder)
	checkToken(&v, req.FencingToken)
	var to violations
	checkHolder(&to, req.To)
	for _, x := range to {
		v.add("to", "%s", x.Description)
	}
	if len(to) == 0 && req.To == req.Holder {
		v.add("to", "must name another holder than holder")
	}
	if p := req.ToPrincipal; p != "" && (len(p) > MaxPrincipalLen || !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })) {
		v.add("toPrincipal", "must be a principal: at most %d bytes of UTF-8 without whitespace or control characters", MaxPrincipalLen)
	}
	if req.Reserve < 0 || req.Reserve > MaxTransferReserve || req.Reserve%time.Millisecond != 0 {
		v.add("reserveMs", "must be between 1 and %d", MaxTransferReserve.Milliseconds())
	}
	if req.Session != nil {
		checkSession(&v, req.Session, false)
	}
	checkpoint = normalizeCheckpoint(&v, req.Checkpoint)
	return checkpoint, v.err()
}

// Transfer ends the caller's live holding now, as Release does, and
// reserves the lease for req.To for req.Reserve: To's acquire in that
// window, by req.ToPrincipal (default the caller's own principal), gets
// the next token, anyone else's is refused with a *ReservedError. Repeating it succeeds and changes nothing while nobody has
// acquired since; anything else is ErrLost. Its event is released, with
// Successor set.
func (m *Manager) Transfer(ctx context.Context, req TransferRequest) (Lease, error) {
	cp, err := checkTransfer(req)
	if err != nil {
		return Lease{}, err
	}
	reserve := req.Reserve
	if reserve == 0 {
		reserve = DefaultTransferReserve
	}
	toPrincipal := req.ToPrincipal
	if toPrincipal == "" {
		toPrincipal = req.Principal
	}
	return m.end(ctx, "transfer", req.Name, endRequest{holder: req.Holder, principal: req.Principal, token: req.FencingToken,
		checkpoint: cp, to: req.To, toPrincipal: toPrincipal, reserve: reserve, session: req.Session})
}
