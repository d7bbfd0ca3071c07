package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/leasesvc/leasesvc/client"
	"github.com/leasesvc/leasesvc/fence"
)

// fenceCase is the "fence" case of PROTOCOL.md (docs/contract.md §17): the
// service's proofs verify through its JWKS, and a Guard refuses altered,
// re-signed, unknown-key, other-lease, stale and bare-number proofs, each
// with its reason.
func fenceCase(ctx context.Context, e env) error {
	a, b := e.holder, e.holder+"-b"
	keys := &fence.RemoteKeys{URL: strings.TrimSuffix(os.Getenv("LEASESVC_URL"), "/") + "/.well-known/jwks.json"}
	v, err := fence.NewVerifier(keys, "leasesvc")
	if err != nil {
		return err
	}
	g := fence.NewGuard(v)
	l, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: a, TTL: e.ttl})
	if err != nil {
		return err
	}
	mine, driver := string(l.Proof), os.Getenv("LEASE_PROOF")
	verified := func(step, proof string) error {
		c, err := v.Verify(ctx, proof)
		if err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
		emit(map[string]any{"step": step, "lease": c.Lease, "holder": c.Holder, "token": c.FencingToken})
		return nil
	}
	if err := verified("verify", mine); err != nil {
		return err
	}
	if err := verified("verify_driver", driver); err != nil {
		return err
	}
	h, p, s := split(mine)
	_, _, ds := split(driver)
	tampered := h + "." + b64(strings.Replace(unb64(p), `"fencingToken":1,`, `"fencingToken":1000000,`, 1)) + "." + s
	other := h + "." + p + "." + ds
	hdr := unb64(h)
	at := strings.Index(hdr, `"kid":"`) + len(`"kid":"`)
	swap := "A"
	if hdr[at] == 'A' {
		swap = "B"
	}
	unknown := b64(hdr[:at]+swap+hdr[at+1:]) + "." + p + "." + s
	refused := func(step string, err error) error {
		if err == nil {
			emit(map[string]any{"step": step, "error": "none"})
			return fmt.Errorf("%s: admitted", step)
		}
		emit(map[string]any{"step": step, "error": fence.Reason(err), "message": err.Error()})
		return nil
	}
	verify := func(proof string) error { _, err := v.Verify(ctx, proof); return err }
	check := func(proof string) error { _, err := g.Check(ctx, e.name, proof); return err }
	for _, st := range []struct {
		step string
		err  func() error
	}{
		{"tampered", func() error { return verify(tampered) }},
		{"wrong_signature", func() error { return verify(other) }},
		{"unknown_kid", func() error { return verify(unknown) }},
	} {
		if err := refused(st.step, st.err()); err != nil {
			return err
		}
	}
	c, err := g.Check(ctx, e.name, mine)
	if err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	emit(map[string]any{"step": "guard", "token": c.FencingToken})
	if err := refused("other_lease", check(driver)); err != nil {
		return err
	}
	if _, err := e.c.Release(ctx, e.name, a, l.FencingToken); err != nil {
		return err
	}
	next, err := e.c.Acquire(ctx, e.name, client.AcquireRequest{Holder: b, TTL: e.ttl})
	if err != nil {
		return err
	}
	if c, err = g.Check(ctx, e.name, string(next.Proof)); err != nil {
		return fmt.Errorf("next holder: %w", err)
	}
	emit(map[string]any{"step": "next_holder", "holder": c.Holder, "token": c.FencingToken})
	if err := refused("stale", check(mine)); err != nil {
		return err
	}
	if err := refused("forged", check("1000000")); err != nil {
		return err
	}
	if err := refused("missing", check("")); err != nil {
		return err
	}
	emit(map[string]any{"step": "highest", "token": g.Highest(e.name)})
	emit(map[string]any{"step": "done"})
	return nil
}

// split returns a compact JWS's three parts (empty ones when it has fewer).
func split(proof string) (header, payload, sig string) {
	parts := append(strings.SplitN(proof, ".", 3), "", "")
	return parts[0], parts[1], parts[2]
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func unb64(s string) string {
	b, _ := base64.RawURLEncoding.DecodeString(s)
	return string(b)
}
