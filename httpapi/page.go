package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/leasesvc/leasesvc/internal/wire"
)

// pageOverhead is room kept in Limits.PageBytes for the page's envelope
// and its nextPageToken (a sealed token of a name of at most 128 bytes).
const pageOverhead = 512

// writePage answers a list page, ending it early once its encoding would
// pass Limits.PageBytes (docs/contract.md §9): then it holds the leases
// that fit, at least one, and its nextPageToken, from after(the last
// lease's name), continues after them. So a slow reader holds at most
// about PageBytes of this instance's memory, whatever the page size asked.
func (a *api) writePage(w http.ResponseWriter, page wire.List, after func(last string) string) {
	out := struct {
		Leases        []json.RawMessage `json:"leases"`
		NextPageToken string            `json:"nextPageToken"`
	}{Leases: make([]json.RawMessage, 0, len(page.Leases)), NextPageToken: page.NextPageToken}
	size := pageOverhead
	for i, l := range page.Leases {
		b, err := wire.Marshal(l)
		if err != nil {
			writeJSON(w, http.StatusOK, "application/json", page) // cannot happen: answers what it can
			return
		}
		if i > 0 && size+len(b)+1 > a.cfg.Limits.PageBytes {
			out.NextPageToken = after(page.Leases[i-1].Name)
			break
		}
		size += len(b) + 1
		out.Leases = append(out.Leases, b)
	}
	writeJSON(w, http.StatusOK, "application/json", out)
}
