// Package all registers every lease backend of this module with package
// backend (see backend.Register), as a program that picks its backend by
// name imports it: import _ "github.com/leasesvc/leasesvc/backend/all".
package all

import (
	// Each backend registers itself in its init function.
	_ "github.com/leasesvc/leasesvc/backend/firestore"
	_ "github.com/leasesvc/leasesvc/backend/memory"
	_ "github.com/leasesvc/leasesvc/backend/postgres"
	_ "github.com/leasesvc/leasesvc/backend/spanner"
)
