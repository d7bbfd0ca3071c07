package httpapi

import (
	"errors"
	"math"
	"net/http"
	"net/url"

	"github.com/leasesvc/leasesvc/internal/wire"
	"github.com/leasesvc/leasesvc/lease"
)

// pageOverhead is room kept in Limits.PageBytes for the page's envelope
// and its nextPageToken (a sealed token of a name of at most 128 bytes).
const pageOverhead = 512

// writePage answers a list page with the leases ls reads, lease by lease, and ends it early once its encoding would pass
// Limits.PageBytes (docs/contract.md §9): then it holds the leases that
// fit, at least one, and its nextPageToken continues after them; seal
// turns the Manager's page token into the caller's. Leases are read a
// chunk at a time (lister) and each is encoded and written on its own, so
// a client that reads slowly holds one chunk of this instance's memory,
// not the page's. A read that fails once the page has begun ends the page
// there, with a token that reads again. Each chunk is charged to the
// memory budget (docs/contract.md §16) while the page holds it: a first
// chunk the budget refuses is a 429 or 503, a later one ends the page
// early, with its token.
func (a *api) writePage(w http.ResponseWriter, r *http.Request, ls *lister, seal func(inner string) string) {
	defer ls.acct.Close()
	pos := ls.req.PageToken // where the page's next lease would be read
	size, written := pageOverhead, 0
	next := ""
	for stop := false; !stop; {
		chunk, err := ls.next()
		if err != nil {
			if written == 0 {
				var me *memoryError
				if errors.As(err, &me) {
					a.fail(w, r, a.memoryProblem(me.refusal))
					return
				}
				a.fail(w, r, a.errorProblem(r, err))
				return
			}
			next = seal(pos) // the page ends here; the caller reads on from there
			break
		}
		for _, l := range chunk {
			e, err := encodeJSON(wire.FromLease(l))
			if err != nil || written > 0 && size+len(e.bytes())+1 > a.cfg.Limits.PageBytes {
				e.release()
				if written == 0 { // cannot happen for our types
					a.fail(w, r, problem{status: http.StatusInternalServerError, code: codeInternal, detail: "internal error"})
					return
				}
				next, stop = seal(pos), true
				break
			}
			sep := []byte{','}
			if written == 0 {
				a.observeOp(r, "ok")
				startPage(w)
				sep = []byte(`{"leases":[`)
			}
			var n int
			_, err = w.Write(sep)
			if err == nil {
				n, err = w.Write(e.bytes())
			}
			e.release()
			if err != nil {
				return // the client has gone, or its write deadline passed
			}
			size += n + 1
			written++
			pos = ls.after(l.Name)
		}
		if !stop && ls.done {
			next, stop = seal(ls.req.PageToken), true
		}
	}
	if written == 0 {
		a.observeOp(r, "ok")
		startPage(w)
		_, _ = w.Write([]byte(`{"leases":[`))
	}
	tok, _ := wire.Marshal(next)
	_, _ = w.Write([]byte(`],"nextPageToken":` + string(tok) + "}\n"))
}

// startPage writes the headers of a page.
func startPage(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// pageSizeParam reads a list's pageSize from its query q, as checkQuery
// passed it: absent, lease.DefaultPageSize; else decimal digits only (no
// sign, space or other form strconv.Atoi takes), 0 meaning the default and
// more than lease.MaxPageSize read as MaxPageSize (docs/contract.md §3).
// Anything else is a 400 invalid_argument naming pageSize.
func pageSizeParam(q url.Values) (int, *problem) {
	if !q.Has("pageSize") {
		return lease.DefaultPageSize, nil
	}
	n, ok := decimal(q.Get("pageSize"))
	switch {
	case !ok:
		return 0, &problem{status: http.StatusBadRequest, code: codeInvalidArgument, detail: "the request has invalid fields",
			violations: []lease.FieldViolation{{Field: "pageSize", Description: "must be a non-negative integer in decimal digits, without a sign or spaces"}}}
	case n == 0:
		return lease.DefaultPageSize, nil
	}
	return int(min(n, lease.MaxPageSize)), nil
}

// decimal reads s as a non-negative integer: one or more ASCII digits and
// nothing else. strconv.Atoi and ParseInt also take a sign, so "+5" and
// "-0" (a query's "%2B5", "-0") would pass for counts; decimal refuses
// them, and spaces, "_" and the empty string. A value beyond
// math.MaxInt64 reads as math.MaxInt64.
func decimal(s string) (n int64, ok bool) {
	if s == "" {
		return 0, false
	}
	for i := range len(s) {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		if n > (math.MaxInt64-int64(d))/10 {
			n = math.MaxInt64 // saturated; the rest must still be digits
			continue
		}
		n = n*10 + int64(d)
	}
	return n, true
}
