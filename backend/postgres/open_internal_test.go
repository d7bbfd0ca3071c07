package postgres

import "testing"

// TestEnvBatchMax: LEASESVC_POSTGRES_BATCH_MAX is 1–BatchMaxLimit, unset
// DefaultBatchMax; anything else names the setting.
func TestEnvBatchMax(t *testing.T) {
	for v, want := range map[string]int{"": DefaultBatchMax, "1": 1, "100": 100, "1000": 1000} {
		if n, err := envBatchMax(func(string) string { return v }); err != nil || n != want {
			t.Errorf("%q: %d, %v; want %d", v, n, err, want)
		}
	}
	for _, v := range []string{"0", "1001", "-1", "ten"} {
		if _, err := envBatchMax(func(string) string { return v }); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}
