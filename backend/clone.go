package backend

import "slices"

// Clone returns a copy of r that shares no memory with it: its metadata and
// value are copied (nil stays nil). A store that keeps rows in memory hands
// out clones, so that neither the decide that wrote a row nor a reader of
// it can change the stored one.
func Clone(r Row) Row {
	r.Metadata, r.Value = slices.Clone(r.Metadata), slices.Clone(r.Value)
	return r
}
