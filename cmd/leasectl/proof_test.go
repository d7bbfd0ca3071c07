package main

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

// TestRunExportsTheProof (issue 39 item 5): CMD gets the service's signed
// proof of the holding as LEASESVC_PROOF, beside LEASE_FENCING_TOKEN,
// through a session and with plain renewals; leasectl never prints it.
func TestRunExportsTheProof(t *testing.T) {
	svc := e2e.StartService(t, map[string]string{"LEASESVC_LOG_LEVEL": "warn", "LEASESVC_MIN_TTL": "200ms"})
	for _, flags := range [][]string{nil, {"--plain-renewals"}} {
		name := e2e.UniqueName("runproof")
		args := append([]string{"run", name, "--holder", "prover", "--ttl", "2s"}, flags...)
		args = append(args, "--", "sh", "-c", `echo "proof=$LEASESVC_PROOF token=$LEASE_FENCING_TOKEN"`)
		out, errOut, code := ctl(t, svc.URL, args...)
		if code != 0 {
			t.Fatalf("run %v: exit %d\n%s", flags, code, errOut)
		}
		m := regexp.MustCompile(`proof=([^ ]*) token=1`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("run %v: CMD printed %q", flags, out)
		}
		parts := strings.Split(m[1], ".")
		if len(parts) != 3 {
			t.Fatalf("run %v: LEASESVC_PROOF %q is no compact JWS", flags, m[1])
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		var claims struct {
			Lease        string `json:"lease"`
			FencingToken int64  `json:"fencingToken"`
			Holder       string `json:"holder"`
		}
		if err != nil || json.Unmarshal(payload, &claims) != nil || claims.Lease != name || claims.FencingToken != 1 || claims.Holder != "prover" {
			t.Fatalf("run %v: the proof's payload %s (%v) is not of this holding", flags, payload, err)
		}
		if strings.Contains(errOut, m[1]) {
			t.Fatalf("run %v: leasectl printed the proof on stderr:\n%s", flags, errOut)
		}
	}
}
