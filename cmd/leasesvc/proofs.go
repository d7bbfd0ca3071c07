package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/leasesvc/leasesvc/internal/proofkey"
)

// parseProofs reads the settings of the fencing proofs (docs/contract.md
// §17); every error names its variable.
func parseProofs(getenv func(string) string, instance string) (proofkey.Config, error) {
	c := proofkey.Config{Instance: instance, Issuer: proofkey.DefaultIssuer, Retention: proofkey.DefaultRetention, MaxKeys: proofkey.DefaultMaxKeys}
	if v := getenv("LEASESVC_PROOF_ISSUER"); v != "" {
		if len(v) > 200 {
			return c, fmt.Errorf("LEASESVC_PROOF_ISSUER=%q: want at most 200 characters", v)
		}
		c.Issuer = v
	}
	if v := getenv("LEASESVC_PROOF_KEY_RETENTION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Hour {
			return c, fmt.Errorf("LEASESVC_PROOF_KEY_RETENTION=%q: want a duration of at least 1h, such as 720h", v)
		}
		c.Retention = d
	}
	if v := getenv("LEASESVC_PROOF_MAX_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			return c, fmt.Errorf("LEASESVC_PROOF_MAX_KEYS=%q: want an integer from 1 to 10000", v)
		}
		c.MaxKeys = n
	}
	return c, nil
}
