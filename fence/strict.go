package fence

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"math/big"
)

// The signature rules the project's three verifiers share (Go here,
// Python's leasesvc._ed25519, TypeScript's fence), checked against one set
// of vectors (testdata/ed25519_vectors.json): crypto/ed25519 alone accepts
// non-canonical encodings of a key or R and points of small order, which
// the others refuse; and encoding/base64 alone accepts many spellings of
// one segment (decodeSegment). A proof must verify alike everywhere.

// errStrict reports a signature refused by the shared rules.
var errStrict = errors.New("fence: signature refused by the strict rules")

var (
	fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	orderL = func() *big.Int {
		l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
		return l
	}()
	// smallOrderY are the y coordinates of the 8 points of small order
	// (each with either sign of x where x ≠ 0), little-endian.
	smallOrderY = func() [][]byte {
		pm1 := new(big.Int).Sub(fieldP, big.NewInt(1))
		ys := [][]byte{le(big.NewInt(0)), le(big.NewInt(1)), le(pm1)}
		for _, h := range []string{
			"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
			"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		} {
			b, _ := hex.DecodeString(h)
			ys = append(ys, b)
		}
		return ys
	}()
)

// le is n as 32 little-endian bytes.
func le(n *big.Int) []byte {
	b := make([]byte, 32)
	n.FillBytes(b)
	for i, j := 0, 31; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return b
}

// fromLE reads 32 little-endian bytes.
func fromLE(b []byte) *big.Int {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return new(big.Int).SetBytes(r)
}

// strictPoint refuses a point encoding that is not canonical (y ≥ p, or
// the sign of x set where x is 0) or of small order.
func strictPoint(enc []byte) error {
	y := make([]byte, 32)
	copy(y, enc)
	y[31] &= 0x7f // the sign of x; x = 0 only for y = ±1, of small order
	yn := fromLE(y)
	if yn.Cmp(fieldP) >= 0 {
		return errStrict
	}
	for _, s := range smallOrderY {
		if bytes.Equal(y, s) {
			return errStrict
		}
	}
	return nil
}

// strictVerify is ed25519.Verify under the shared rules: S < L, canonical
// encodings of the key and of R, neither of small order.
func strictVerify(pub ed25519.PublicKey, msg, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	if fromLE(sig[32:]).Cmp(orderL) >= 0 {
		return false
	}
	if strictPoint(pub) != nil || strictPoint(sig[:32]) != nil {
		return false
	}
	return ed25519.Verify(pub, msg, sig)
}

// errNotCanonical: a segment decodes, but is not the one encoding of its
// bytes.
var errNotCanonical = errors.New("not the canonical base64url encoding of its bytes")

// decodeSegment decodes one base64url segment of a proof, accepting it only
// in its one canonical encoding (RFC 7515 §2: unpadded base64url, RFC 4648
// §3.5: unused bits zero): encoding/base64 alone lets the last character's
// unused low bits differ and skips CR and LF, so one proof would have many
// spellings that all verify, and a sink that deduplicates or logs proofs by
// their text would count them apart. Every segment counts, the signature
// included: the signature does not cover its own encoding.
func decodeSegment(s string) ([]byte, error) {
	b, err := b64.DecodeString(s)
	if err != nil {
		return nil, err
	}
	if b64.EncodeToString(b) != s {
		return nil, errNotCanonical
	}
	return b, nil
}
