package fence

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
)

// TestSharedVectors: the Go verifier accepts and refuses the shared Ed25519
// vectors (RFC 8032 §7.1 and the edge cases: S ≥ L, non-canonical and
// small-order points) as the Python and TypeScript verifiers do.
func TestSharedVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/ed25519_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []struct {
			Name      string `json:"name"`
			PublicKey string `json:"public_key"`
			Message   string `json:"message"`
			Signature string `json:"signature"`
			Reason    string `json:"reason"`
			Valid     bool   `json:"valid"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Vectors) < 30 {
		t.Fatalf("%d vectors; want the shared set", len(file.Vectors))
	}
	for _, v := range file.Vectors {
		pub, err1 := hex.DecodeString(v.PublicKey)
		msg, err2 := hex.DecodeString(v.Message)
		sig, err3 := hex.DecodeString(v.Signature)
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("%s: bad hex", v.Name)
		}
		if got := strictVerify(pub, msg, sig); got != v.Valid {
			t.Errorf("%s: verified %v, want %v (%s)", v.Name, got, v.Valid, v.Reason)
		}
	}
}
