package proofkey

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/lease"
)

// keySet is the cached list of published keys.
type keySet struct {
	i      *Issuer
	mu     sync.Mutex // held across a backend read: concurrent askers share it
	doc    []byte     // the JWKS document
	kids   map[string]bool
	readAt time.Time // local monotonic time of the last read; zero: never
}

func (s *keySet) init(i *Issuer) { s.i = i }

// maxCacheAge is how long a JWKS document is served without a backend
// read, unless a caller asks for a kid it does not hold.
const maxCacheAge = 30 * time.Second

// JWKS returns the JWKS document of every listed key. It reads the
// backend when its cached list is older than 30 s, or when kid is not
// empty and not in the list, at most once per Config.Reread.
func (i *Issuer) JWKS(ctx context.Context, kid string) ([]byte, error) {
	s := &i.set
	s.mu.Lock()
	defer s.mu.Unlock()
	age := time.Since(s.readAt)
	stale := s.readAt.IsZero() || age >= maxCacheAge || kid != "" && !s.kids[kid]
	if !stale || age < i.cfg.Reread && s.doc != nil {
		return s.doc, nil
	}
	keys, err := i.listed(ctx)
	if err != nil {
		if s.doc != nil { // serve what is known: a verifier asks again
			i.cfg.Logger.WarnContext(ctx, "proof keys: reading the key records failed; serving the cached list", "err", err)
			return s.doc, nil
		}
		return nil, err
	}
	doc, err := json.Marshal(fence.JWKS{Keys: keys})
	if err != nil {
		return nil, fmt.Errorf("proofkey: encode JWKS: %w", err)
	}
	s.doc, s.readAt, s.kids = doc, time.Now(), map[string]bool{}
	for _, k := range keys {
		s.kids[k.Kid] = true
	}
	return doc, nil
}

// listPage is how many key records one backend list call reads.
const listPage = 500

// listed reads every key record and returns the keys to list: records
// live or ended less than the retention ago, latest expiry first, at most
// MaxKeys, this instance's own key always among them.
func (i *Issuer) listed(ctx context.Context) ([]fence.JWK, error) {
	type entry struct {
		jwk    fence.JWK
		expire time.Time
	}
	var all []entry
	var now time.Time
	for after := ""; ; {
		rows, serverTime, err := i.loop.List(ctx, lease.KeyRecordPrefix, after, listPage)
		if err != nil {
			return nil, fmt.Errorf("proofkey: list key records: %w", err)
		}
		if now.IsZero() {
			now = serverTime
		}
		for _, row := range rows {
			r, err := lease.DecodeRow(row)
			if err != nil {
				return nil, err
			}
			var j fence.JWK
			if lease.Tombstone(r) || json.Unmarshal(r.Metadata, &j) != nil {
				continue
			}
			if _, err := j.PublicKey(); err != nil || lease.KeyRecordPrefix+j.Kid != r.Name {
				continue // not a key this service wrote
			}
			if r.Name == lease.KeyRecordPrefix+i.kid || now.Before(r.ExpireTime.Add(i.cfg.Retention)) {
				all = append(all, entry{j, r.ExpireTime})
			}
		}
		if len(rows) < listPage {
			break
		}
		after = rows[len(rows)-1].Name
	}
	slices.SortFunc(all, func(a, b entry) int {
		switch { // own key first, then the latest expiry
		case a.jwk.Kid == b.jwk.Kid:
			return 0
		case a.jwk.Kid == i.kid:
			return -1
		case b.jwk.Kid == i.kid:
			return 1
		}
		return cmp.Or(b.expire.Compare(a.expire), cmp.Compare(a.jwk.Kid, b.jwk.Kid))
	})
	out := make([]fence.JWK, 0, min(len(all), i.cfg.MaxKeys))
	for _, e := range all[:min(len(all), i.cfg.MaxKeys)] {
		out = append(out, e.jwk)
	}
	return out, nil
}
