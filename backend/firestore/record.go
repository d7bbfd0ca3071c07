package firestore

import (
	"fmt"
	"time"

	gfs "cloud.google.com/go/firestore"

	"github.com/leasesvc/leasesvc/backend"
)

// Field names of a lease document.
const (
	fieldName         = "name"
	fieldHolder       = "holder"
	fieldFencingToken = "fencingToken"
	fieldTTLMs        = "ttlMs"
	fieldAcquireTime  = "acquireTime"
	fieldRenewTime    = "renewTime"
	fieldExpireTime   = "expireTime"
	fieldTransitions  = "transitions"
	fieldMetadata     = "metadata"
)

// leaseDoc is a lease document as stored.
type leaseDoc struct {
	Name         string    `firestore:"name"`
	Holder       string    `firestore:"holder"`
	FencingToken int64     `firestore:"fencingToken"`
	TTLMs        int64     `firestore:"ttlMs"`
	AcquireTime  time.Time `firestore:"acquireTime"`
	RenewTime    time.Time `firestore:"renewTime"`
	ExpireTime   time.Time `firestore:"expireTime"`
	Transitions  int64     `firestore:"transitions"`
	Metadata     string    `firestore:"metadata"`
}

// normalize returns r as Firestore stores it: times at microsecond precision
// in UTC, metadata copied (nil for none). It refuses a TTL that is not a
// whole number of milliseconds, which ttlMs cannot hold.
func normalize(name string, r *backend.Record) (*backend.Record, error) {
	if r.TTL%time.Millisecond != 0 {
		return nil, fmt.Errorf("backend/firestore: record %q: TTL %v is not a whole number of milliseconds", name, r.TTL)
	}
	out := *r
	out.Name = name
	out.AcquireTime = storedTime(r.AcquireTime)
	out.RenewTime = storedTime(r.RenewTime)
	out.ExpireTime = storedTime(r.ExpireTime)
	out.Metadata = nil
	if len(r.Metadata) > 0 {
		out.Metadata = append([]byte(nil), r.Metadata...)
	}
	return &out, nil
}

// storedTime is t at Firestore's timestamp precision.
func storedTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

// toDoc is the stored form of a normalized record.
func toDoc(r *backend.Record) leaseDoc {
	return leaseDoc{
		Name: r.Name, Holder: r.Holder, FencingToken: r.FencingToken, TTLMs: r.TTL.Milliseconds(),
		AcquireTime: r.AcquireTime, RenewTime: r.RenewTime, ExpireTime: r.ExpireTime,
		Transitions: r.Transitions, Metadata: string(r.Metadata),
	}
}

// updates lists every field of d, for a conditional update that replaces
// the whole lease.
func (d leaseDoc) updates() []gfs.Update {
	return []gfs.Update{
		{Path: fieldName, Value: d.Name},
		{Path: fieldHolder, Value: d.Holder},
		{Path: fieldFencingToken, Value: d.FencingToken},
		{Path: fieldTTLMs, Value: d.TTLMs},
		{Path: fieldAcquireTime, Value: d.AcquireTime},
		{Path: fieldRenewTime, Value: d.RenewTime},
		{Path: fieldExpireTime, Value: d.ExpireTime},
		{Path: fieldTransitions, Value: d.Transitions},
		{Path: fieldMetadata, Value: d.Metadata},
	}
}

// fromSnapshot decodes an existing lease document.
func fromSnapshot(ds *gfs.DocumentSnapshot) (*backend.Record, error) {
	var d leaseDoc
	if err := ds.DataTo(&d); err != nil {
		return nil, fmt.Errorf("backend/firestore: decode lease document %q: %w", ds.Ref.ID, err)
	}
	r := &backend.Record{
		Name: ds.Ref.ID, Holder: d.Holder, FencingToken: d.FencingToken, TTL: time.Duration(d.TTLMs) * time.Millisecond,
		AcquireTime: d.AcquireTime.UTC(), RenewTime: d.RenewTime.UTC(), ExpireTime: d.ExpireTime.UTC(),
		Transitions: d.Transitions,
	}
	if d.Metadata != "" {
		r.Metadata = []byte(d.Metadata)
	}
	return r, nil
}
