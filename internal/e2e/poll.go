package e2e

import "time"

// Poll calls cond every tick until it holds or limit has passed, and
// returns how long that took and whether cond held. It is for black-box
// waits on other processes (their exit, a file they write, what the
// service answers), which send no event a test could wait on; in-process
// waits use the event itself or a synctest bubble.
func Poll(limit, tick time.Duration, cond func() bool) (time.Duration, bool) {
	start := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	for !cond() {
		if time.Since(start) > limit {
			return time.Since(start), false
		}
		<-t.C
	}
	return time.Since(start), true
}
