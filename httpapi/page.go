package httpapi

import (
	"errors"
	"net/http"

	"github.com/leasesvc/leasesvc/internal/wire"
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
					a.fail(w, r, a.memoryProblem(r, me.need))
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
