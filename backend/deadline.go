package backend

import (
	"context"
	"time"
)

// DeadlineSlack is how close to ctx's deadline a deadline error must come
// for AwaitDeadline to wait for ctx itself to expire.
const DeadlineSlack = 50 * time.Millisecond

// AwaitDeadline lets ctx catch up with a deadline error of a call made
// with it. A server ends an RPC at the deadline it was sent (and a context
// derived from ctx with the same deadline can fire first), which can be a
// moment before ctx's own timer fires; a Store that then checks ctx.Err(),
// or a caller that compares the error with it, would find ctx still live.
// A Store calls AwaitDeadline on a deadline error before it classifies it:
// when ctx's deadline is at most DeadlineSlack away, it waits (that long at
// most) for ctx to be done. Otherwise it returns at once.
func AwaitDeadline(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > DeadlineSlack {
		return
	}
	t := time.NewTimer(max(time.Until(dl), 0) + DeadlineSlack)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
