package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/leasesvc/leasesvc/internal/e2e"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-bin", "/x"}, ""},
		{nil, "-bin"},
		{[]string{"-bin", "/x", "-agents", "20", "-leases", "10"}, "agents"},
		{[]string{"-bin", "/x", "-ttl", "10ms"}, "-ttl"},
		{[]string{"-bin", "/x", "-duration", "1s", "-sample", "1s"}, "-duration"},
		{[]string{"-bin", "/x", "extra"}, "unexpected"},
	}
	for _, tc := range cases {
		c, err := parseConfig(tc.args, &bytes.Buffer{})
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tc.args, err)
		case tc.wantErr == "" && (c.leases != 10000 || c.agents != 1000 || c.duration != 10*time.Minute):
			t.Errorf("%q: defaults %+v", tc.args, c)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: err %v, want one naming %q", tc.args, err, tc.wantErr)
		}
	}
}

func TestShortSoak(t *testing.T) {
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"-bin", e2e.Binary(t), "-json", "-duration", "2s", "-sample", "500ms", "-leases", "60", "-agents", "6", "-ttl", "1s"},
		nil, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	var res result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("JSON: %v\n%s", err, stdout.String())
	}
	s := res.Summary
	if s.Renewals < 100 || s.Lost != 0 || s.Failed != 0 || s.Goroutines == 0 || len(res.Samples) < 3 || s.RSSMiBMedian <= 0 {
		t.Fatalf("summary %+v with %d samples", s, len(res.Samples))
	}
}

func TestCountGoroutines(t *testing.T) {
	dump := "SIGQUIT: quit\n\ngoroutine 1 [running]:\nmain.main()\n\t/x.go:1\n\ngoroutine 7 [IO wait]:\ninternal/poll.wait()\ncreated by net/http.(*Server).Serve in goroutine 1\n\t/y.go:2\n\ngoroutine 8 [IO wait]:\ncreated by net/http.(*Server).Serve in goroutine 1\n"
	n, tops := countGoroutines(dump)
	if n != 3 || tops["net/http.(*Server).Serve"] != 2 || tops["main.main()"] != 1 {
		t.Fatalf("countGoroutines = %d, %v", n, tops)
	}
}
