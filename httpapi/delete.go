package httpapi

import (
	"io"
	"net/http"

	"github.com/leasesvc/leasesvc/lease"
)

// deleteLease removes a lease nobody holds (DELETE /v1/leases/{name},
// docs/contract.md §15): 200 with the lease as it was, 409 lease_held or
// lease_reserved while it is held or reserved, 404 not_found when it never
// existed or is already deleted. The request has no body.
func (a *api) deleteLease(w http.ResponseWriter, r *http.Request, name string) {
	n, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1))
	if err != nil || n > 0 {
		a.fail(w, r, problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "body", Description: "must be empty: a delete takes no body"}}})
		return
	}
	ctx, cancel := a.timeout(r, 0)
	defer cancel()
	l, err := a.m.Delete(ctx, lease.DeleteRequest{Name: name, Operator: principalOf(r)})
	a.answer(w, r, l, err)
}
