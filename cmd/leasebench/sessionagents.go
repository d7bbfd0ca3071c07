package main

import (
	"context"
	"time"

	"github.com/leasesvc/leasesvc/internal/rawsession"
)

// closeAgents closes every agent opened (nil entries were never opened),
// width at a time, each within 10 s, whether or not ctx has ended: their
// sessions release what they hold.
func closeAgents(ctx context.Context, agents []*rawsession.Agent, width int) {
	ctx = context.WithoutCancel(ctx)
	_ = parallel(ctx, len(agents), width, func(i int) error {
		if agents[i] != nil {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = agents[i].Close(cctx)
		}
		return nil
	})
}
