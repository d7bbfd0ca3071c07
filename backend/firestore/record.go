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

// leaseDoc is a lease document as stored: the columns of a backend.Row.
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
	Principal string `firestore:"principal,omitempty"`
	// RevokedBy and RevokeReason are the document's backend.Legacy fields:
	// never written now, read for documents that older versions wrote.
	RevokedBy    string `firestore:"revokedBy,omitempty"`
	RevokeReason string `firestore:"revokeReason,omitempty"`
	// Succession holds backend.Row.Value, the encoded value of every field
	// of the record that is not a field of its own here (the field's name
	// is that of its first content, the succession state); absent when
	// there is none.
	Succession string `firestore:"succession,omitempty"`
}

// encode returns the document that stores row under name, and the row as
// it reads back from that document: times at microsecond precision in UTC,
// nothing shared with row. It refuses a TTL that is not a whole number of
// milliseconds, which ttlMs cannot hold.
func encode(name string, r *backend.Row) (leaseDoc, *backend.Row, error) {
	if r.TTL%time.Millisecond != 0 {
		return leaseDoc{}, nil, fmt.Errorf("backend/firestore: record %q: TTL %v is not a whole number of milliseconds", name, r.TTL)
	}
	row := *r
	row.Name = name
	row.AcquireTime, row.RenewTime, row.ExpireTime = storedTime(row.AcquireTime), storedTime(row.RenewTime), storedTime(row.ExpireTime)
	d := leaseDoc{
		Name: row.Name, Holder: row.Holder, FencingToken: row.FencingToken, TTLMs: row.TTL.Milliseconds(),
		AcquireTime: row.AcquireTime, RenewTime: row.RenewTime, ExpireTime: row.ExpireTime,
		Transitions: row.Transitions, Metadata: string(row.Metadata), Principal: row.Principal,
		RevokedBy: row.Legacy.RevokedBy, RevokeReason: row.Legacy.RevokeReason, Succession: string(row.Value),
	}
	return d, d.row(name), nil
}

// storedTime is t at Firestore's timestamp precision.
func storedTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }

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
	// optional adds a field that is absent when empty, as in a document
	// that never had it.
	optional := func(cur, next, path string) {
		var v any = next
		if next == "" {
			v = gfs.Delete
		}
		add(cur != next, path, v)
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
	optional(cur.RevokedBy, next.RevokedBy, fieldRevokedBy)
	optional(cur.RevokeReason, next.RevokeReason, fieldRevokeReason)
	optional(cur.Succession, next.Succession, fieldSuccession)
	return u
}

// decode reads an existing lease document as stored.
func decode(ds *gfs.DocumentSnapshot) (leaseDoc, error) {
	var d leaseDoc
	if err := ds.DataTo(&d); err != nil {
		return leaseDoc{}, fmt.Errorf("backend/firestore: decode lease document %q: %w", ds.Ref.ID, err)
	}
	return d, nil
}

// fromSnapshot decodes an existing lease document into its row.
func fromSnapshot(ds *gfs.DocumentSnapshot) (*backend.Row, error) {
	d, err := decode(ds)
	if err != nil {
		return nil, err
	}
	return d.row(ds.Ref.ID), nil
}

// row is the row that d stores under the document ID name, sharing no
// memory with d; empty metadata or value reads as nil.
func (d *leaseDoc) row(name string) *backend.Row {
	r := &backend.Row{
		Name: name, Holder: d.Holder, FencingToken: d.FencingToken, TTL: time.Duration(d.TTLMs) * time.Millisecond,
		AcquireTime: d.AcquireTime.UTC(), RenewTime: d.RenewTime.UTC(), ExpireTime: d.ExpireTime.UTC(),
		Transitions: d.Transitions, Principal: d.Principal,
		Legacy: backend.Legacy{RevokedBy: d.RevokedBy, RevokeReason: d.RevokeReason},
	}
	if d.Metadata != "" {
		r.Metadata = []byte(d.Metadata)
	}
	if d.Succession != "" {
		r.Value = []byte(d.Succession)
	}
	return r
}
