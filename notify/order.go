package notify

import "github.com/leasesvc/leasesvc/lease"

// Newer reports whether event b comes after event a of the same lease in
// the order consumers use: by fencing token, and within one token acquired
// before released or expired.
func Newer(a, b lease.Event) bool {
	if a.Lease.FencingToken != b.Lease.FencingToken {
		return b.Lease.FencingToken > a.Lease.FencingToken
	}
	return a.Type == lease.EventAcquired && b.Type != lease.EventAcquired
}
