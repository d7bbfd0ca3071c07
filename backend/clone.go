package backend

import "slices"

// Clone returns a copy of r that shares no memory with it: its metadata,
// checkpoint and candidates are copied (nil stays nil). A store that keeps
// records in memory hands out clones, so that neither the decide that wrote
// a record nor a reader of it can change the stored one.
func Clone(r Record) Record {
	r.Metadata, r.Checkpoint, r.Candidates = slices.Clone(r.Metadata), slices.Clone(r.Checkpoint), slices.Clone(r.Candidates)
	return r
}
