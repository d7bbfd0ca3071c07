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

// watchLapses checks, every interval from now until the returned stop is
// called, which agents do not lead (their deadline passed); stop returns
// how many did at some check.
func watchLapses(ctx context.Context, agents []*rawsession.Agent, every time.Duration) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	lapsed := map[int]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for i, a := range agents {
				if !a.Leads() {
					lapsed[i] = true
				}
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		return len(lapsed)
	}
}
