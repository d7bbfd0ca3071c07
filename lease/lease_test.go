package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/backend/memory"
	"github.com/leasesvc/leasesvc/lease"
)

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"a": true, "team-a.scheduler": true, "A_1.b-c": true, "0": true, strings.Repeat("n", 128): true,
		"": false, ".a": false, "-a": false, "_a": false, "a/b": false, "a b": false, "a:b": false,
		"é": false, strings.Repeat("n", 129): false,
	} {
		if got := lease.ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestNewManagerChecksConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  lease.Config
		want string
	}{
		{lease.Config{MinTTL: time.Microsecond}, "MinTTL"},
		{lease.Config{MinTTL: 1500 * time.Microsecond}, "MinTTL"},
		{lease.Config{MinTTL: time.Minute, MaxTTL: time.Second}, "MaxTTL"},
		{lease.Config{MaxWait: -time.Second}, "MaxWait"},
	} {
		if _, err := lease.NewManager(memory.New(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewManager(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := lease.NewManager(nil, lease.Config{}); err == nil {
		t.Error("NewManager(nil store) succeeded")
	}
	m, err := lease.NewManager(memory.New(), lease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Config(); c.MinTTL != time.Second || c.MaxTTL != time.Hour || c.MaxWait != time.Minute {
		t.Fatalf("defaults %+v, want 1s, 1h, 1m", c)
	}
}

func TestInvalidErrorListsEveryField(t *testing.T) {
	m, _ := lease.NewManager(memory.New(), lease.Config{})
	err := m.ValidateAcquire(lease.AcquireRequest{Name: "bad name", Holder: "", TTL: time.Millisecond, Metadata: []byte(`1`), Wait: -1})
	inv, ok := err.(*lease.InvalidError)
	if !ok {
		t.Fatalf("ValidateAcquire = %v, want *InvalidError", err)
	}
	var fields []string
	for _, v := range inv.Violations {
		fields = append(fields, v.Field)
	}
	if strings.Join(fields, ",") != "name,holder,ttlMs,metadata,waitMs" {
		t.Fatalf("violations name %v, want name, holder, ttlMs, metadata, waitMs", fields)
	}
}
