package httpapi

// SetSocketDone makes f run, with the upgrade request's Host, as each
// session socket ends, after its slot and charge were given back, until
// the returned restore.
func SetSocketDone(f func(host string)) (restore func()) {
	socketDone.Store(&f)
	return func() { socketDone.Store(nil) }
}

// SocketCost and SessionCost are the fixed charges of a session socket.
const (
	SocketCost  = socketCost
	SessionCost = sessionCost
)

// Waiting counts the waiting acquires under way (REST and session).
func (h *Handler) Waiting() int {
	s := h.api.waiting
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
