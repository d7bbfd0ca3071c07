package client

// A loss before its answer (docs/contract.md §14, A5): an instance that
// queued a lease's answer after a push about it (an instance of before
// S6) has the agent read lost L/t, then result L/t, then acks that were
// decided without L in its table. The agent remembers such a lost while an
// acquire of L is in flight on the socket, and does not lead the result.

// lostBeforeAnswer remembers m, a lost or revoked push of the current
// socket, when an acquire of its lease is in flight on sc (held already
// or not: a repeated acquire's result must not bring it back).
func (sc *sconn) lostBeforeAnswer(m inMsg) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for _, p := range sc.pending {
		if p.typ == "acquire" && p.name == m.Name {
			if sc.lostEarly == nil {
				sc.lostEarly = map[holdingKey]error{}
			}
			sc.lostEarly[holdingKey{m.Name, m.FencingToken}] = lostError(m)
			return
		}
	}
}

// answeredAcquireLocked returns the lost remembered for the holding that
// m, the answer to the acquire p, gives (nil: none), and forgets what was
// remembered for p's lease once no acquire of it is in flight; sc.mu held,
// p no longer pending.
func (sc *sconn) answeredAcquireLocked(p *pendingCall, m inMsg) error {
	if len(sc.lostEarly) == 0 {
		return nil
	}
	var err error
	if m.Type == "result" && m.Lease != nil {
		err = sc.lostEarly[holdingKey{m.Lease.Name, m.Lease.FencingToken}]
	}
	for _, q := range sc.pending {
		if q.typ == "acquire" && q.name == p.name {
			return err
		}
	}
	for k := range sc.lostEarly {
		if k.name == p.name {
			delete(sc.lostEarly, k)
		}
	}
	return err
}
