package fence_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/leasesvc/leasesvc/fence"
)

// A sink keeps the highest token per lease: the successor's proof passes,
// the deposed holder's is refused, and so is a bare number.
func ExampleGuard() {
	// The service's key; a sink would fetch the JWKS (RemoteKeys) or load
	// a saved one (ParseJWKS).
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	pub := priv.Public().(ed25519.PublicKey)
	jwks, _ := json.Marshal(fence.JWKS{Keys: []fence.JWK{fence.NewJWK(pub)}})
	keys, _ := fence.ParseJWKS(jwks)
	v, _ := fence.NewVerifier(keys, "leasesvc")
	g := fence.NewGuard(v)

	proof := func(token int64) string { // what the acquire answers carried
		p, _ := fence.Sign(priv, fence.KeyID(pub), fence.Claims{Lease: "orders", FencingToken: token, Holder: "w", Issuer: "leasesvc"})
		return p
	}
	ctx := context.Background()
	for _, p := range []string{proof(2), proof(1), "9999"} {
		c, err := g.Check(ctx, "orders", p)
		switch {
		case err == nil:
			fmt.Println("write with token", c.FencingToken)
		case errors.Is(err, fence.ErrStale):
			fmt.Println("refused: stale")
		default:
			fmt.Println("refused:", strings.TrimPrefix(err.Error(), "fence: "))
		}
	}
	// Output:
	// write with token 2
	// refused: stale
	// refused: malformed proof: not a compact JWS (three base64url parts joined by dots)
}
