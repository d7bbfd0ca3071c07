// Package proofkey is the service side of fencing proofs (docs/contract.md
// §17): each instance makes its own Ed25519 key at start, keeps the private
// half in memory only, publishes the public half in the backend as a
// hidden record (lease.KeyRecordPrefix + kid) before it signs anything, and
// renews that record while it runs. The JWKS route lists every key whose
// record is live or ended less than the retention ago, newest first, at
// most MaxKeys (docs/security.md#fencing-proofs); records past the
// retention are removed from the backend (Prune).
package proofkey

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasesvc/leasesvc/backend"
	"github.com/leasesvc/leasesvc/fence"
	"github.com/leasesvc/leasesvc/lease"
)

// Defaults of Config.
const (
	DefaultIssuer    = "leasesvc"
	DefaultRetention = 30 * 24 * time.Hour
	DefaultMaxKeys   = 100
	DefaultTTL       = 10 * time.Minute
)

// Config configures an Issuer; zero fields take their defaults.
type Config struct {
	// Issuer is the "iss" of every proof (LEASESVC_PROOF_ISSUER). Default
	// DefaultIssuer.
	Issuer string
	// Instance is the holder of this instance's key record: the instance
	// id, for operators. Required.
	Instance string
	// Retention is how long a key stays listed after its record ended (its
	// instance stopped, or stopped renewing) (LEASESVC_PROOF_KEY_RETENTION).
	// Default DefaultRetention.
	Retention time.Duration
	// MaxKeys caps the keys listed, newest record expiry first
	// (LEASESVC_PROOF_MAX_KEYS). Default DefaultMaxKeys.
	MaxKeys int
	// TTL is the key record's TTL, renewed every third of it while the
	// instance runs: a crashed instance's key record ends at most TTL
	// after its last renewal. Default DefaultTTL.
	TTL time.Duration
	// Reread is the least time between two backend reads of the key
	// records (an unknown kid asked for, or a cached list older than it).
	// Default 1s.
	Reread time.Duration
	// Logger receives renewal failures. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) check() error {
	if c.Instance == "" {
		return errors.New("proofkey: Config.Instance is required")
	}
	if c.Issuer == "" {
		c.Issuer = DefaultIssuer
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Reread == 0 {
		c.Reread = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Retention < 0:
		return fmt.Errorf("proofkey: Config.Retention %v must be positive", c.Retention)
	case c.MaxKeys < 1:
		return fmt.Errorf("proofkey: Config.MaxKeys %d must be ≥ 1", c.MaxKeys)
	case c.TTL < 3*time.Second || c.TTL%time.Millisecond != 0:
		return fmt.Errorf("proofkey: Config.TTL %v must be whole milliseconds ≥ 3s", c.TTL)
	}
	return nil
}

// Issuer signs proofs with this instance's key and lists the service's
// published keys. Safe for concurrent use.
type Issuer struct {
	cfg   Config
	store backend.Store
	loop  *backend.Loop
	priv  ed25519.PrivateKey
	kid   string
	hdr   string // the encoded JWS header of every proof
	jwk   []byte // the record's metadata: this key's JWK
	token int64  // the key record's fencing token
	set   keySet
}

// Publish makes this instance's key and stores its public half, durably,
// as the record lease.KeyRecordPrefix+kid, before it returns the Issuer
// that signs with it. Run renews the record; Close ends it.
func Publish(ctx context.Context, store backend.Store, cfg Config, loop ...backend.LoopOption) (*Issuer, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("proofkey: generate key: %w", err)
	}
	j := fence.NewJWK(pub)
	jwk, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("proofkey: encode key: %w", err)
	}
	i := &Issuer{cfg: cfg, store: store, loop: backend.NewLoop(store, loop...), priv: priv, kid: j.Kid, hdr: fence.EncodedHeader(j.Kid), jwk: jwk}
	i.set.init(i)
	name := lease.KeyRecordPrefix + i.kid
	snap, err := lease.UpdateWith(ctx, i.loop.Update, name, func(cur lease.Snapshot) (*lease.Record, error) {
		r := &lease.Record{Name: name, Holder: cfg.Instance, FencingToken: 1, TTL: cfg.TTL, AcquireTime: cur.ServerTime,
			RenewTime: cur.ServerTime, ExpireTime: cur.ServerTime.Add(cfg.TTL), Transitions: 1, Metadata: jwk}
		if cur.Record != nil { // a kid is a fresh key's thumbprint: never seen
			return nil, fmt.Errorf("proofkey: key record %q exists already", name)
		}
		return r, nil
	})
	if err != nil {
		return nil, fmt.Errorf("proofkey: publish key %s: %w", i.kid, err)
	}
	i.token = snap.Record.FencingToken
	return i, nil
}

// Kid returns the key id of this instance's key.
func (i *Issuer) Kid() string { return i.kid }

// Sign returns the proof of l's holding: fencing token, holder and
// principal of lease l.Name, issued at its acquire time.
func (i *Issuer) Sign(l lease.Lease) (string, error) {
	return fence.SignWithHeader(i.priv, i.hdr, fence.Claims{Lease: l.Name, FencingToken: l.FencingToken, Holder: l.Holder,
		Principal: l.Principal, IssuedAt: l.AcquireTime.Unix(), Issuer: i.cfg.Issuer})
}

// Run renews the key record every third of its TTL until ctx is done, and
// then removes the key records past the retention (Prune). A failed
// renewal is logged and tried again at the next tick: the key stays listed
// for the retention after the record's last expiry, so proofs signed
// meanwhile still verify.
func (i *Issuer) Run(ctx context.Context) error {
	t := time.NewTicker(i.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := i.write(ctx, i.cfg.TTL); err != nil && ctx.Err() == nil {
			i.cfg.Logger.WarnContext(ctx, "proof key: renewing its record failed; trying again", "kid", i.kid, "err", err)
		}
		if n, err := i.Prune(ctx); err != nil && ctx.Err() == nil {
			i.cfg.Logger.WarnContext(ctx, "proof keys: removing the records past the retention failed; trying again", "removed", n, "err", err)
		}
	}
}

// Close ends the key record at the backend's current time: its retention
// counts from now. The Issuer must not sign after Close.
func (i *Issuer) Close(ctx context.Context) error {
	if err := i.write(ctx, 0); err != nil {
		return fmt.Errorf("proofkey: end the record of key %s: %w", i.kid, err)
	}
	return nil
}

// write sets the key record's expiry to ttl from the backend's time.
func (i *Issuer) write(ctx context.Context, ttl time.Duration) error {
	name := lease.KeyRecordPrefix + i.kid
	_, err := lease.UpdateWith(ctx, i.loop.Update, name, func(cur lease.Snapshot) (*lease.Record, error) {
		r := cur.Record
		if r == nil || r.FencingToken != i.token || r.Holder != i.cfg.Instance {
			return nil, fmt.Errorf("proofkey: key record %q is gone or not this instance's", name)
		}
		next := *r
		next.RenewTime, next.ExpireTime = cur.ServerTime, cur.ServerTime.Add(ttl)
		return &next, nil
	})
	return err
}
