package httpapi

import (
	"encoding/json"
	"time"

	"github.com/leasesvc/leasesvc/lease"
)

// leaseJSON is the wire form of a lease (SPEC §1).
type leaseJSON struct {
	Name         string          `json:"name"`
	Holder       string          `json:"holder"`
	FencingToken int64           `json:"fencingToken"`
	TTLMs        int64           `json:"ttlMs"`
	AcquireTime  string          `json:"acquireTime"`
	RenewTime    string          `json:"renewTime"`
	ExpireTime   string          `json:"expireTime"`
	Held         bool            `json:"held"`
	RemainingMs  int64           `json:"remainingMs"`
	ServerTime   string          `json:"serverTime"`
	Transitions  int64           `json:"transitions"`
	Metadata     json.RawMessage `json:"metadata"`
}

// emptyObject is the metadata of a lease that has none.
var emptyObject = json.RawMessage(`{}`)

func toJSON(l lease.Lease) leaseJSON {
	md := l.Metadata
	if len(md) == 0 {
		md = emptyObject
	}
	return leaseJSON{
		Name:         l.Name,
		Holder:       l.Holder,
		FencingToken: l.FencingToken,
		TTLMs:        l.TTL.Milliseconds(),
		AcquireTime:  formatTime(l.AcquireTime),
		RenewTime:    formatTime(l.RenewTime),
		ExpireTime:   formatTime(l.ExpireTime),
		Held:         l.Held(),
		RemainingMs:  l.Remaining().Milliseconds(),
		ServerTime:   formatTime(l.ServerTime),
		Transitions:  l.Transitions,
		Metadata:     md,
	}
}

// formatTime renders a server time as RFC 3339 in UTC with up to
// microsecond precision.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// listJSON is the wire form of a page of leases.
type listJSON struct {
	Leases        []leaseJSON `json:"leases"`
	NextPageToken string      `json:"nextPageToken"`
}
