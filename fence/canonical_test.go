package fence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/fence"
)

// alphabet is the base64url alphabet (RFC 4648 §5), in value order.
const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// TestProofCanonicalEncoding: a proof is accepted in its one canonical
// encoding only. The same bytes spelled otherwise, by setting the unused
// low bits of a segment's last character (RFC 4648 §3.5) or by a line break
// inside a segment (which encoding/base64 skips), are malformed, the
// signature segment included: the signature does not cover its own
// encoding, so such a spelling would otherwise verify.
func TestProofCanonicalEncoding(t *testing.T) {
	k := newKey(t)
	v, err := fence.NewVerifier(fence.StaticKeys{k.kid: k.pub}, "leasesvc")
	if err != nil {
		t.Fatal(err)
	}
	valid := k.sign(t, claims("orders", 7))
	if _, err := v.Verify(t.Context(), valid); err != nil {
		t.Fatalf("the canonical proof: %v", err)
	}
	parts := strings.Split(valid, ".")
	respell := func(i int, seg string) string {
		p := append([]string(nil), parts...)
		p[i] = seg
		return strings.Join(p, ".")
	}
	type variant struct{ name, proof string }
	var variants []variant
	for i, name := range []string{"header", "payload", "signature"} {
		seg := parts[i]
		// The last character carries 6·len − 8·⌊6·len/8⌋ unused low bits.
		if unused := len(seg) * 6 % 8; unused > 0 {
			last := strings.IndexByte(alphabet, seg[len(seg)-1])
			if last < 0 || last&(1<<unused-1) != 0 {
				t.Fatalf("%s %q: its last character is not canonical to begin with", name, seg)
			}
			variants = append(variants, variant{name + ": an unused low bit set",
				respell(i, seg[:len(seg)-1]+string(alphabet[last|1]))})
		} else if name == "signature" {
			t.Fatalf("a %d-character signature has no unused bits: the test would prove nothing", len(seg))
		}
		variants = append(variants, variant{name + ": a line break inside", respell(i, seg[:4]+"\n"+seg[4:])})
	}
	for _, tc := range variants {
		t.Run(tc.name, func(t *testing.T) {
			if tc.proof == valid {
				t.Fatal("the variant is the canonical proof")
			}
			_, err := v.Verify(t.Context(), tc.proof)
			if !errors.Is(err, fence.ErrMalformed) {
				t.Fatalf("Verify = %v, want ErrMalformed", err)
			}
			if r := fence.Reason(err); r != "malformed" {
				t.Errorf("Reason = %q, want malformed", r)
			}
		})
	}
}
