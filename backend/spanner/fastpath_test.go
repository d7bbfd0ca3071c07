package spanner

import (
	"testing"
)

func TestParseFastPath(t *testing.T) {
	for _, m := range []FastPath{FastPathAdaptive, FastPathAlways, FastPathNever} {
		got, err := ParseFastPath(m.String())
		if err != nil || got != m {
			t.Errorf("ParseFastPath(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	for _, bad := range []string{"", "true", "Always", "sometimes"} {
		if _, err := ParseFastPath(bad); err == nil {
			t.Errorf("ParseFastPath(%q) succeeded", bad)
		}
	}
}
