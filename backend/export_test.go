package backend

// BatchQueued returns how many attempts wait in l's batcher (0 without
// one), so that tests wait on the queue instead of sleeping.
func BatchQueued(l *Loop) int {
	if l.batch == nil {
		return 0
	}
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	return len(l.batch.queue)
}
