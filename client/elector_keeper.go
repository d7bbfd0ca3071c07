package client

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// keep returns the Keeper Run holds the lease with, and the function to
// call when Run returns: ElectorConfig.Keeper, or one built from the
// config (the only place the Elector reads Session and PlainRenewals). It
// sets CancelBefore for the Keeper's holdings.
func (e *Elector) keep(ctx context.Context) (*Keeper, func(), error) {
	e.cfg.CancelBefore = e.plainCancelBefore
	if k := e.cfg.Keeper; k != nil {
		if err := k.vet(e.fitCancelBefore); err != nil {
			return nil, nil, err
		}
		return k, func() {}, nil
	}
	k, err := NewKeeper(ctx, e.c, KeeperConfig{
		PlainRenewals: e.cfg.PlainRenewals, Session: e.cfg.Session, TTL: e.cfg.TTL, DriftMargin: e.cfg.DriftMargin,
		Fits:         func(w time.Duration) error { _, err := e.cancelBeforeFor(w); return err },
		RetryBackoff: e.cfg.RetryBackoff, ReleaseTimeout: e.cfg.ReleaseTimeout, Clock: e.cfg.Clock,
		Logger: e.cfg.Logger.With("lease", e.name, "holder", e.cfg.Holder),
	})
	if err != nil {
		return nil, nil, err
	}
	if err := k.vet(e.fitCancelBefore); err != nil {
		k.Close()
		return nil, nil, err
	}
	e.sayMode(k)
	return k, k.Close, nil
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
// of mode, not for every Run or term. (A Keeper given in ElectorConfig
// was built, and its mode said, by its owner.)
func (e *Elector) sayMode(k *Keeper) {
	if e.logged {
		return
	}
	mode := k.String()
	if k.sess == nil {
		why := strings.TrimSuffix(strings.TrimPrefix(k.why, " ("), ")")
		if why == "" {
			why = "ElectorConfig.PlainRenewals is set"
		}
		mode += ": " + why
	}
	modeSaid.Lock()
	defer modeSaid.Unlock()
	if modeSaid.mode == mode {
		return
	}
	modeSaid.mode = mode
	_, _ = fmt.Fprintf(modeOut, "leasesvc: elector %q holds %s\n", e.name, mode)
}

// fitCancelBefore sets CancelBefore for holdings that a session of window
// w keeps, or says why none fits.
func (e *Elector) fitCancelBefore(w time.Duration) error {
	cb, err := e.cancelBeforeFor(w)
	if err == nil {
		e.cfg.CancelBefore = cb
	}
	return err
}

// cancelBeforeFor checks that a term through a session of window w can
// last: its deadline moves with every acknowledged heartbeat (every w/4),
// so CancelBefore must leave room for a missed one. A default CancelBefore
// becomes at most a tenth of the window.
func (e *Elector) cancelBeforeFor(w time.Duration) (time.Duration, error) {
	cb := e.cfg.CancelBefore
	if e.cancelBefore == 0 {
		cb = min(e.plainCancelBefore, w/10)
	}
	if room := SafeSpan(w, e.cfg.DriftMargin) - w/2; cb >= room {
		return 0, fmt.Errorf("ElectorConfig.CancelBefore %v must be below %v for a session window of %v", cb, room, w)
	}
	return cb, nil
}
