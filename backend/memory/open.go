package memory

import (
	"context"

	"github.com/leasesvc/leasesvc/backend"
)

func init() {
	backend.Register(backend.Opener{
		Name:    "memory",
		Summary: "in the process: nothing is kept across a restart, nothing is shared between instances",
		Open: func(context.Context, func(string) string, backend.OpenOptions) (backend.Opened, error) {
			return backend.Opened{Store: New(), Close: func() error { return nil }}, nil
		},
	})
}
