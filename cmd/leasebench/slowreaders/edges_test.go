package main

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasesvc/leasesvc/cmd/leasebench/internal/sockmix"
	"github.com/leasesvc/leasesvc/lease"
)

// TestPadHeaders: the padding is about the size asked, in lines no
// longer than asked, and parses as headers.
func TestPadHeaders(t *testing.T) {
	pad := padHeaders(1_000_000, 4000)
	if len(pad) < 1_000_000 || len(pad) > 1_000_000+4000 {
		t.Fatalf("%d bytes of headers, want about 1000000", len(pad))
	}
	for _, line := range strings.SplitAfter(string(pad), "\r\n") {
		if len(line) > 4000 {
			t.Fatalf("a line of %d bytes, want at most 4000", len(line))
		}
	}
	h, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(append(pad, "\r\n"...)))).ReadMIMEHeader()
	if err != nil || len(h) != 250 || h.Get("X-Pad-0001") == "" {
		t.Fatalf("%d headers, %v; want 250", len(h), err)
	}
	if _, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\nHost: x\r\n" + string(padHeaders(100, 16)) + "\r\n"))); err != nil {
		t.Fatalf("a request with short pad lines: %v", err)
	}
}

// TestPercentile: nearest rank, whatever the order.
func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Millisecond, 99: 99 * time.Millisecond, 100: 100 * time.Millisecond, 0.1: time.Millisecond} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if got := percentile(ds[:3], 99); got != 100*time.Millisecond {
		t.Errorf("p99 of three = %v, want the largest", got)
	}
	if got := percentile(nil, 99); got != 0 {
		t.Errorf("p99 of none = %v", got)
	}
}

// TestTableNamesAreTheLongestValid: the lease table's names and holders
// are valid and of the longest lengths docs/contract.md §1 allows.
func TestTableNamesAreTheLongestValid(t *testing.T) {
	for _, si := range []int{0, 4} {
		for _, i := range []int{0, 999} {
			name, holder := sockmix.TableName(si, i), sockmix.TableHolder(si, i)
			if !lease.ValidName(name) || len(name) != lease.MaxNameLen {
				t.Errorf("name %q: valid %v, %d characters", name, lease.ValidName(name), len(name))
			}
			if n := utf8.RuneCountInString(holder); n != lease.MaxHolderLen || len(holder) < 990 {
				t.Errorf("holder of %d characters, %d bytes", n, len(holder))
			}
			if err := lease.ValidateRelease(lease.ReleaseRequest{Name: name, Holder: holder, FencingToken: 1}); err != nil {
				t.Errorf("holder refused: %v", err)
			}
		}
	}
	if sockmix.TableName(1, 2) == sockmix.TableName(2, 1) {
		t.Error("two leases share a name")
	}
}

// TestParseConfigMixes: every mix is known by name, and a bad one names
// the known ones.
func TestParseConfigMixes(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseConfig([]string{"-mixes", "halfframe,all45,prefix", "bin"}, &stderr)
	if err != nil || len(c.mixes) != 3 || !c.mixes[1].issue45() || c.mixes[1].issue37() || !c.mixes[2].issue37() {
		t.Fatalf("config %+v, %v", c.mixes, err)
	}
	if c.goodPrincipal() <= c.principals || c.goodPrincipal() < c.edgePrincipals {
		t.Fatalf("good principal %d shares a principal with the mixes", c.goodPrincipal())
	}
	if _, err := parseConfig([]string{"-mixes", "nope", "bin"}, &stderr); err == nil || !strings.Contains(err.Error(), "paddedwaits1") {
		t.Fatalf("unknown mix: %v", err)
	}
}
