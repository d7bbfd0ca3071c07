package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// sharedSession is the session a Client's Keepers hold their leases
// through by default (KeeperConfig.Session nil, Window 0): one per Client,
// opened when the first Keeper needs it, opened again when the service
// ended it, and closed when the last Keeper stops using it.
type sharedSession struct {
	mu          sync.Mutex
	s           *Session
	users       int
	unsupported bool // the service answered that it offers no sessions
}

// sharedSession returns the Client's shared session, opening it with cfg
// when none is open, and the function to call when done with it.
func (c *Client) sharedSession(ctx context.Context, cfg SessionConfig, closeTimeout time.Duration) (*Session, func(), error) {
	sh := &c.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.unsupported {
		return nil, nil, ErrSessionsUnsupported
	}
	if sh.s == nil || sh.s.Err() != nil { // none, or the service ended it (rule L2)
		s, err := c.OpenSession(ctx, cfg)
		if errors.Is(err, ErrSessionsUnsupported) {
			sh.unsupported = true
		}
		if err != nil {
			return nil, nil, err
		}
		sh.s = s
	}
	s := sh.s
	sh.users++
	var once sync.Once
	done := func() {
		once.Do(func() {
			sh.mu.Lock()
			sh.users--
			last := sh.users == 0 && sh.s == s
			if last {
				sh.s = nil
			}
			sh.mu.Unlock()
			if last {
				ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
				defer cancel()
				_ = s.Close(ctx)
			}
		})
	}
	return s, done, nil
}
