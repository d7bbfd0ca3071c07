package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// keep builds the Keeper of an Elector of Client.NewElector (the defaults:
// the Client's shared session, falling back as the Keeper does, its
// window vetted with the CancelBefore given), sets CancelBefore for it,
// and returns the function that closes it when Run returns.
func (e *Elector) keep(ctx context.Context) (func(), error) {
	k, err := NewKeeper(ctx, e.c, KeeperConfig{CancelBefore: e.given,
		Logger: e.cfg.Logger.With("lease", e.name, "holder", e.cfg.Holder)})
	if err != nil {
		return nil, err
	}
	if err := e.fit(k); err != nil {
		k.Close()
		return nil, err
	}
	e.sayMode(k)
	e.k = k
	return func() {
		k.Close()
		e.k = nil
	}, nil
}

// modeOut is where an Elector without a Logger says how it holds its lease.
var modeOut io.Writer = os.Stderr

// modeSaid is the mode this process's Electors last said on modeOut.
var modeSaid struct {
	sync.Mutex
	mode string
}

// sayMode says how the Keeper an Elector built holds the lease: its Logger
// does (the Keeper's line), and without a Logger the Elector writes one
// line on stderr, such as `leasesvc: elector "x" holds through a session
// (window 1s)` or `leasesvc: elector "x" holds with plain renewals (ttl
// 30s): the service offers no sessions`, once per process for each change
// of mode, not for every Run or term. (A Keeper given to NewElector was
// built, and its mode said, by its owner.)
func (e *Elector) sayMode(k *Keeper) {
	if e.logged {
		return
	}
	mode := k.ModeInfo().String()
	modeSaid.Lock()
	defer modeSaid.Unlock()
	if modeSaid.mode == mode {
		return
	}
	modeSaid.mode = mode
	_, _ = fmt.Fprintf(modeOut, "leasesvc: elector %q holds %s\n", e.name, mode)
}
