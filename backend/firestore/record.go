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
	fieldPrincipal    = "principal"
	fieldRevokedBy    = "revokedBy"
	fieldRevokeReason = "revokeReason"
	fieldSuccession   = "succession"
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
	// The fields below were added with authentication; documents written
	// before it lack them and read as empty.
	Principal    string `firestore:"principal,omitempty"`
	RevokedBy    string `firestore:"revokedBy,omitempty"`
	RevokeReason string `firestore:"revokeReason,omitempty"`
	// Succession is the succession state of docs/contract.md §8, the JSON
	// of backend.MarshalSuccession; absent when there is none.
	Succession string `firestore:"succession,omitempty"`
}

// normalize returns r as Firestore stores it: times at microsecond precision
// in UTC, metadata copied (nil for none), the succession state as it reads
// back from its JSON (a copy). It refuses a TTL that is not a whole number
// of milliseconds, which ttlMs cannot hold, and succession state that does
// not encode.
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
	succ, err := backend.MarshalSuccession(&out)
	if err == nil {
		err = backend.UnmarshalSuccession(succ, &out)
	}
	if err != nil {
		return nil, fmt.Errorf("backend/firestore: %w", err)
	}
	return &out, nil
}

// storedTime is t at Firestore's timestamp precision.
func storedTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

// toDoc is the stored form of a normalized record.
func toDoc(r *backend.Record) (leaseDoc, error) {
	succ, err := backend.MarshalSuccession(r)
	if err != nil {
		return leaseDoc{}, fmt.Errorf("backend/firestore: %w", err)
	}
	return leaseDoc{
		Name: r.Name, Holder: r.Holder, FencingToken: r.FencingToken, TTLMs: r.TTL.Milliseconds(),
		AcquireTime: r.AcquireTime, RenewTime: r.RenewTime, ExpireTime: r.ExpireTime,
		Transitions: r.Transitions, Metadata: string(r.Metadata),
		Principal: r.Principal, RevokedBy: r.RevokedBy, RevokeReason: r.RevokeReason,
		Succession: string(succ),
	}, nil
}

// changes lists the fields in which next differs from cur, for a
// conditional update of a document that holds cur: the precondition makes
// sure it still does, so the fields not listed already have their values.
// A renew writes two fields (renewTime, expireTime), a release one.
func changes(cur, next leaseDoc) []gfs.Update {
	var u []gfs.Update
	add := func(changed bool, path string, v any) {
		if changed {
			u = append(u, gfs.Update{Path: path, Value: v})
		}
	}
	add(cur.Name != next.Name, fieldName, next.Name)
	add(cur.Holder != next.Holder, fieldHolder, next.Holder)
	add(cur.FencingToken != next.FencingToken, fieldFencingToken, next.FencingToken)
	add(cur.TTLMs != next.TTLMs, fieldTTLMs, next.TTLMs)
	add(!cur.AcquireTime.Equal(next.AcquireTime), fieldAcquireTime, next.AcquireTime)
	add(!cur.RenewTime.Equal(next.RenewTime), fieldRenewTime, next.RenewTime)
	add(!cur.ExpireTime.Equal(next.ExpireTime), fieldExpireTime, next.ExpireTime)
	add(cur.Transitions != next.Transitions, fieldTransitions, next.Transitions)
	add(cur.Metadata != next.Metadata, fieldMetadata, next.Metadata)
	add(cur.Principal != next.Principal, fieldPrincipal, next.Principal)
	add(cur.RevokedBy != next.RevokedBy, fieldRevokedBy, next.RevokedBy)
	add(cur.RevokeReason != next.RevokeReason, fieldRevokeReason, next.RevokeReason)
	if cur.Succession != next.Succession {
		var v any = next.Succession
		if next.Succession == "" {
			v = gfs.Delete // absent, as in a document that never had any
		}
		add(true, fieldSuccession, v)
	}
	return u
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
		Principal:   d.Principal, RevokedBy: d.RevokedBy, RevokeReason: d.RevokeReason,
	}
	if d.Metadata != "" {
		r.Metadata = []byte(d.Metadata)
	}
	if err := backend.UnmarshalSuccession([]byte(d.Succession), r); err != nil {
		return nil, fmt.Errorf("backend/firestore: decode lease document %q: %w", ds.Ref.ID, err)
	}
	return r, nil
}
