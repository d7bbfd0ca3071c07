// Package wire is the JSON form of a lease (docs/contract.md §1) that the HTTP API
// answers with and the events carry, so both always agree.
package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/lease"
)

// Lease is the wire form of a lease (docs/contract.md §1).
type Lease struct {
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
	Principal    string          `json:"principal,omitempty"`
	RevokedBy    string          `json:"revokedBy,omitempty"`
	RevokeReason string          `json:"revokeReason,omitempty"`
}

// emptyObject is the metadata of a lease that has none.
var emptyObject = json.RawMessage(`{}`)

// FromLease returns the wire form of l.
func FromLease(l lease.Lease) Lease {
	md := l.Metadata
	if len(md) == 0 {
		md = emptyObject
	}
	return Lease{
		Name:         l.Name,
		Holder:       l.Holder,
		FencingToken: l.FencingToken,
		TTLMs:        l.TTL.Milliseconds(),
		AcquireTime:  FormatTime(l.AcquireTime),
		RenewTime:    FormatTime(l.RenewTime),
		ExpireTime:   FormatTime(l.ExpireTime),
		Held:         l.Held(),
		RemainingMs:  l.Remaining().Milliseconds(),
		ServerTime:   FormatTime(l.ServerTime),
		Transitions:  l.Transitions,
		Metadata:     md,
		Principal:    l.Principal,
		RevokedBy:    l.RevokedBy,
		RevokeReason: l.RevokeReason,
	}
}

// ToLease parses the wire form back into a lease.
func (w Lease) ToLease() (lease.Lease, error) {
	l := lease.Lease{Record: backend.Record{Name: w.Name, Holder: w.Holder, FencingToken: w.FencingToken, TTL: time.Duration(w.TTLMs) * time.Millisecond, Transitions: w.Transitions, Metadata: w.Metadata, Principal: w.Principal, RevokedBy: w.RevokedBy, RevokeReason: w.RevokeReason}}
	for _, f := range []struct {
		dst *time.Time
		src string
	}{{&l.AcquireTime, w.AcquireTime}, {&l.RenewTime, w.RenewTime}, {&l.ExpireTime, w.ExpireTime}, {&l.ServerTime, w.ServerTime}} {
		t, err := time.Parse(time.RFC3339Nano, f.src)
		if err != nil {
			return lease.Lease{}, fmt.Errorf("wire: lease %q: %w", w.Name, err)
		}
		*f.dst = t
	}
	if string(l.Metadata) == "{}" {
		l.Metadata = nil
	}
	return l, nil
}

// FormatTime renders a server time as RFC 3339 in UTC with up to
// microsecond precision.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// List is the wire form of a page of leases.
type List struct {
	Leases        []Lease `json:"leases"`
	NextPageToken string  `json:"nextPageToken"`
}
